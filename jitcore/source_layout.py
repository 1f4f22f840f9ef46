"""Make a source checkout import like the installed package.

The repository keeps `ir/`, `passes/` and `runtime/` beside `jitcore/` (a fixed layout); the
installed distribution puts them inside it as `jitcore.ir`, `jitcore.passes` and
`jitcore.runtime` (pyproject's package-dir), so it claims one top-level name. When jitcore is
imported straight from a checkout (the repository root on `sys.path`), this finder maps those
three names onto the sibling folders, so both ways run the same code under the same names.
An installed copy has the folders inside `jitcore/` and never registers it.
"""
import importlib.abc
import importlib.util
import os
import sys

SIBLING_PACKAGES = ("ir", "passes", "runtime")

_package_dir = os.path.dirname(os.path.abspath(__file__))
_checkout_root = os.path.dirname(_package_dir)


class SiblingPackageFinder(importlib.abc.MetaPathFinder):
    """Finds `jitcore.<name>` for the sibling packages of a source checkout."""

    def find_spec(self, fullname, path, target=None):
        parent, _, name = fullname.partition(".")
        if parent != "jitcore" or name not in SIBLING_PACKAGES:
            return None
        folder = os.path.join(_checkout_root, name)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def is_source_checkout():
    """True when this `jitcore` was imported from a repository checkout, not an installed copy."""
    return (not os.path.isdir(os.path.join(_package_dir, "ir"))
            and all(os.path.isfile(os.path.join(_checkout_root, name, "__init__.py"))
                    for name in SIBLING_PACKAGES))


if is_source_checkout() and not any(isinstance(f, SiblingPackageFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, SiblingPackageFinder())  # before any editable-install finder
