# Runtime hook: let CuPy find the CUDA libraries and headers bundled from the nvidia-* wheels.
#
# cuda-pathfinder (which CuPy uses for NVRTC, the CUDA runtime and cudart's headers) looks for
# nvidia/<lib>/{lib,include} under site.getsitepackages(). In the frozen bundle those folders sit
# directly in sys._MEIPASS, which is no site-packages folder, so it is put first in that list.
# Without bundled CUDA libraries nothing is found there and the installed CUDA toolkit is used.
import site
import sys

_bundle = getattr(sys, "_MEIPASS", None)
_original_getsitepackages = getattr(site, "getsitepackages", None)


def _getsitepackages(prefixes=None):
    found = list(_original_getsitepackages(prefixes)) if _original_getsitepackages else []
    return [_bundle, *[p for p in found if p != _bundle]]


if _bundle:
    site.getsitepackages = _getsitepackages
