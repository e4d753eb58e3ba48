package kafkacodec.spark;

import java.lang.reflect.Field;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * "kafkalog" on the JVM: Spark's own runner of Python data sources (PythonDataSourceV2, which
 * runs kafkacodec.spark.datasource.KafkaLogDataSource, registered by pyspark_kafkalog) plus what
 * PySpark's data source API cannot say: the columns a query needs.  Spark hands a scan builder the
 * required columns (SupportsPushDownRequiredColumns) and the Python reader is then created with
 * that schema, so it decodes those columns only (a query that needs none: offsets only,
 * columnar).  count(*), alone or grouped by topic and partition, is pushed to the reader
 * (SupportsPushDownAggregates): it answers from batch headers, one count per input partition
 * that Spark sums.  Filters go to the Python reader as
 * Spark pushes them (spark.sql.python.filterPushdown.enabled).  Writes and streams go through
 * Spark's own table unchanged.
 *
 * <p>Built by kafkacodec.spark.jvm against the Spark jars of the installed pyspark (the
 * PythonDataSourceV2 classes are Spark's internal API); Spark finds it by its short name through
 * META-INF/services once the jar is on the driver's classpath (spark.jars).
 */
public final class KafkaLogSource extends PythonDataSourceV2 implements DataSourceRegister {
  private String name = "kafkalog";

  public KafkaLogSource() { }

  @Override public String shortName() { return "kafkalog"; }

  /** Spark gives the name the format was asked by; the Python source is looked up under it. */
  @Override public void setShortName(String shortName) {
    super.setShortName(shortName);
    this.name = shortName;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LogTable(super.getTable(schema, partitioning, properties), this);
  }

  /** Spark's private field holding the Python DataSource it created (a Python worker's round
   * trip); null when a Spark version renamed it: each scan then creates its own, as Spark does. */
  private static final Field CREATED = createdField();

  private static Field createdField() {
    try {
      Field field = PythonDataSourceV2.class.getDeclaredField("dataSourceInPython");
      field.setAccessible(true);
      return field;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** A PythonDataSourceV2 of this source for one scan, with the Python DataSource this one made. */
  PythonDataSourceV2 forOneScan() {
    PythonDataSourceV2 own = new PythonDataSourceV2();
    own.setShortName(name);
    if (CREATED != null) {
      try {
        Object created = CREATED.get(this);
        if (created != null) {
          CREATED.set(own, created);
        }
      } catch (ReflectiveOperationException | RuntimeException e) {
        // the scan creates its own
      }
    }
    return own;
  }

  /** Spark's table for the Python source, with its reads pruned; everything else is its own. */
  static final class LogTable implements SupportsRead, SupportsWrite {
    private final Table table;
    private final KafkaLogSource source;

    LogTable(Table table, KafkaLogSource source) {
      this.table = table;
      this.source = source;
    }

    @Override public String name() { return table.name(); }
    @SuppressWarnings("deprecation")
    @Override public StructType schema() { return table.schema(); }
    @Override public Column[] columns() { return table.columns(); }
    @Override public Transform[] partitioning() { return table.partitioning(); }
    @Override public Map<String, String> properties() { return table.properties(); }
    @Override public Set<TableCapability> capabilities() { return table.capabilities(); }

    @SuppressWarnings("deprecation")
    @Override public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new PrunedScanBuilder(source, table.schema(), options);
    }

    @Override public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return ((SupportsWrite) table).newWriteBuilder(info);
    }
  }

  /** The reader's last column when it counts (kafkacodec.spark.datasource.COUNT_COLUMN). */
  static final String COUNT_COLUMN = "kafkalog.count";

  /**
   * Filters first (Spark's order), then an aggregate or the columns; build() creates the Python
   * reader with the counting or the pruned schema (and the columns of the filters pushed) and
   * pushes the same filters to it.
   * Each scan gets its own PythonDataSourceV2 (forOneScan): Spark's caches the Python reader it
   * made first (with that reader's schema and filters) for every later scan of the same
   * instance, which is right only when every scan reads all columns.
   */
  static final class PrunedScanBuilder
      implements SupportsPushDownFilters, SupportsPushDownAggregates, SupportsPushDownRequiredColumns {
    private final KafkaLogSource source;
    private final StructType full;
    private final CaseInsensitiveStringMap options;
    private StructType required;
    private Filter[] offered;
    private Filter[] pushed = new Filter[0];
    private PythonScanBuilder filtered;         // the reader that took them, for all columns
    private StructType counting;                // an aggregate pushed: [group columns..., count]

    PrunedScanBuilder(KafkaLogSource source, StructType full, CaseInsensitiveStringMap options) {
      this.source = source;
      this.full = full;
      this.required = full;
      this.options = options;
    }

    private PythonScanBuilder python(StructType schema) {
      return new PythonScanBuilder(source.forOneScan(), source.name, schema, options);
    }

    @Override public Filter[] pushFilters(Filter[] filters) {
      filtered = python(full);
      Filter[] rest = filtered.pushFilters(filters);
      offered = filters;
      pushed = filtered.pushedFilters();
      return rest;
    }

    @Override public Filter[] pushedFilters() { return pushed; }

    @Override public void pruneColumns(StructType requiredSchema) { required = requiredSchema; }

    /** Each input partition's count is partial: Spark sums them. */
    @Override public boolean supportCompletePushDown(Aggregation aggregation) { return false; }

    /**
     * One count(*) (or count of topic or partition, never null), grouped by topic and partition
     * or not at all, with no filter on another column (Spark gives a Python reader only the
     * filters on its own columns); option countFromHeaders=false declines.  Spark pushes an
     * aggregate only when every filter was pushed.
     */
    @Override public boolean pushAggregation(Aggregation aggregation) {
      if (!options.getBoolean("countFromHeaders", true) || aggregation.aggregateExpressions().length != 1) {
        return false;
      }
      AggregateFunc function = aggregation.aggregateExpressions()[0];
      boolean counts = function instanceof CountStar
          || function instanceof Count count && !count.isDistinct() && grouping(count.column()) != null;
      if (!counts) {
        return false;
      }
      StructType schema = new StructType();
      for (Expression group : aggregation.groupByExpressions()) {
        String column = grouping(group);
        if (column == null || schema.getFieldIndex(column).isDefined()) {
          return false;
        }
        schema = schema.add(full.apply(column));
      }
      for (Filter filter : pushed) {
        for (String column : filter.references()) {
          if (schema.getFieldIndex(column).isEmpty()) {
            return false;
          }
        }
      }
      counting = schema.add(COUNT_COLUMN, DataTypes.LongType, false);
      return true;
    }

    /** topic or partition, when the expression is that column. */
    private static String grouping(Expression expression) {
      if (expression instanceof NamedReference ref && ref.fieldNames().length == 1) {
        String name = ref.fieldNames()[0];
        return name.equals("topic") || name.equals("partition") ? name : null;
      }
      return null;
    }

    @Override public Scan build() {
      if (counting != null) {
        return withPushedFilters(python(counting), counting);
      }
      // Spark resolves a pushed filter's columns in the reader's schema: those stay in it (Spark
      // projects them away above the scan)
      StructType schema = required;
      for (Filter filter : pushed) {
        for (String column : filter.references()) {
          if (schema.getFieldIndex(column).isEmpty()) {
            schema = schema.add(full.apply(column));
          }
        }
      }
      if (filtered != null && schema.fieldNames().length == full.fieldNames().length) {
        return filtered.build();                // every column: that reader as it is
      }
      return withPushedFilters(python(schema), schema);
    }

    private Scan withPushedFilters(PythonScanBuilder builder, StructType schema) {
      if (offered != null) {
        builder.pushFilters(offered);
        // Spark already planned the filters not pushed as its own; the reader must take the
        // same ones now, or rows would be lost or kept wrongly.
        Set<Filter> now = new HashSet<>(Arrays.asList(builder.pushedFilters()));
        if (!now.equals(new HashSet<>(Arrays.asList(pushed)))) {
          throw new IllegalStateException("kafkalog: the Python reader took filters " + now
              + " for columns " + schema.simpleString() + " but " + Arrays.asList(pushed)
              + " for all columns");
        }
      }
      return builder.build();
    }
  }
}
