"""Entry script for `spark-submit`: `spark-submit [--packages ...] cli/spark_submit.py [options]`.

spark-submit runs a file, not a module; this file only hands over to the runner's CLI.
"""

import sys

from jobledger.cli.runner import submit_main

if __name__ == "__main__":
    sys.exit(submit_main())
