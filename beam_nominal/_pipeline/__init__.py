"""The stream's machinery: columnar buffers, the request packer and the uploader (all private).

``BEAM_NOMINAL_TEST_PURE=1`` makes every import of the compiled module (``_fastpath``) fail, so
the Python implementations run even where it is built: how the suite tests the pure build
(``make pure``).
"""

import os
import sys

if os.environ.get("BEAM_NOMINAL_TEST_PURE") == "1":
    sys.modules[__name__ + "._fastpath"] = None  # type: ignore[assignment]  # its import raises ImportError
