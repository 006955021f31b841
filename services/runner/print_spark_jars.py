"""Run by `spark-submit --packages P` (connector.py): prints the jars Spark resolved for P,
as `spark.jars` holds them, on one marked line. It starts no SparkContext: the JVM that
spark-submit started already holds the configuration."""

from pyspark import SparkConf, SparkContext

if __name__ == "__main__":
    SparkContext._ensure_initialized()
    print("jobledger-spark-jars=" + SparkConf().get("spark.jars", ""), flush=True)
