"""Makes `spark.read.format("kafkalog")` and `df.write.format("kafkalog")` work in every
SparkSession without `kafkacodec.spark.register(spark)`.

PySpark 4 looks, on the first use of any Python data source in a session, through every
installed top-level module whose name starts with `pyspark_`, imports it, and registers its
`DefaultSource` attribute when that is a subclass of pyspark.sql.datasource.DataSource, under
`DefaultSource.name()` (pyspark/sql/worker/lookup_data_sources.py).  This package is that
module for kafkacodec; it ships in the same wheel.
"""

try:
    from kafkacodec.spark.datasource import KafkaLogDataSource as DefaultSource
except ImportError:
    # Without pyarrow/pyspark (kafkacodec installed without the [spark] extra) register
    # nothing: an exception here would stop Spark from finding every other Python source too.
    pass
else:
    __all__ = ["DefaultSource"]
