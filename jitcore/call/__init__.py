"""The call path: from a jitted function's arguments to one native call.

  choice         which of the three paths a call takes (native fast call, ctypes entry,
                 Python slow path) and why: the rules in one place, named by explain()
  plan           CallPlan: what one input signature needs at call time, and its fast paths
  dispatch       which known plan fits a call's arguments when signatures alternate
  signature      arguments -> arrays the native code can read, and their signatures
  foreign        torch tensors and other foreign arrays, viewed in place
  arguments      parameter names, static arguments and keywords
  shape_classes  dynamic=True: which extents are run-time values
"""
