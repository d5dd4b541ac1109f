"""The write DoFn in both builds: the compiled ``process`` where the C module is built, and the
Python one (``_PythonProcess``), so a test can run each rule through both."""

from __future__ import annotations

from beam_nominal.beam._dofn import WriteDoFn, _PythonProcess

if issubclass(WriteDoFn, _PythonProcess):  # the pure build (make pure): WriteDoFn is that already
    PythonWriteDoFn = WriteDoFn
else:

    class PythonWriteDoFn(_PythonProcess, WriteDoFn):  # type: ignore[misc,no-redef]
        """WriteDoFn where its compiled process is not built."""


IMPLEMENTATIONS = {"compiled": WriteDoFn, "python": PythonWriteDoFn}
