"""The Dataflow Flex Template's entry (FLEX_TEMPLATE_PYTHON_PY_FILE): the launcher runs it with
the template's parameters as ``--name=value`` options; it submits the job and exits
(``pipelines.files_to_nominal.launch``)."""

import sys

from pipelines.files_to_nominal import launch

if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
