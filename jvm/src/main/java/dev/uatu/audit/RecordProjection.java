package dev.uatu.audit;

import dev.uatu.fold.FoldException;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.MutableProjection;
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A record's audit fields computed by Spark's own expressions: the Python transform
 * {@code jobs.audit.transforms.audit_records} (event time from the Kafka timestamp, a header or
 * a JSON field; the dedupe hash; placement; latency), optimized by Spark and compiled by its
 * code generator, then evaluated here on each Kafka record without making it a Spark row of the
 * query. So the fold computes exactly what the SQL says, for every configuration.
 *
 * <p>Input row, in order ({@link #INPUT_SCHEMA}, the columns Spark's Kafka source gives, plus
 * the batch's audit time): key, value, partition, offset, timestamp, headers (null unless a
 * header is configured), audit_ts. Output, in order: bytes, dedupe_key, event_ms (null when not
 * usable), placed_ms, latency_ms (null without a usable event time).
 */
final class RecordProjection implements RecordFields {
  private static final long serialVersionUID = 1L;

  static final String INPUT_SCHEMA =
      "key binary, value binary, partition int, offset long, timestamp timestamp, "
          + "headers array<struct<key:string,value:binary>>, audit_ts timestamp";
  static final List<String> INPUT_COLUMNS =
      List.of("key", "value", "partition", "offset", "timestamp", "headers", "audit_ts");
  static final List<String> OUTPUT =
      List.of("bytes", "dedupe_key", "event_ms", "placed_ms", "latency_ms");

  // The plan's projections, innermost first: Spark keeps a projection apart when inlining it
  // would compute an expensive expression (a JSON lookup) more than once.
  private final List<Seq<Expression>> expressions;
  private final List<Seq<Attribute>> inputs;
  private final boolean headers;

  private transient MutableProjection[] projections;
  private transient Object[] values;
  private transient GenericInternalRow row;
  private transient InternalRow out;

  private RecordProjection(
      List<Seq<Expression>> expressions, List<Seq<Attribute>> inputs, boolean headers) {
    this.expressions = expressions;
    this.inputs = inputs;
    this.headers = headers;
  }

  /**
   * The projection of {@code projected}: a DataFrame over {@link #INPUT_SCHEMA} (built on an
   * RDD, so the optimizer cannot fold it away) selecting the {@link #OUTPUT} columns.
   */
  static RecordProjection of(Dataset<Row> projected, boolean headers) {
    LogicalPlan plan = projected.queryExecution().optimizedPlan();
    if (!(plan instanceof Project top)) {
      throw new FoldException("expected a projection of the Kafka columns, got\n" + plan);
    }
    List<String> names =
        CollectionConverters.asJava(top.projectList()).stream().map(e -> e.name()).toList();
    if (!names.equals(OUTPUT)) {
      throw new FoldException("the record projection yields " + names + ", not " + OUTPUT);
    }
    List<Seq<Expression>> expressions = new ArrayList<>();
    List<Seq<Attribute>> inputs = new ArrayList<>();
    LogicalPlan node = plan;
    while (node instanceof Project project) {
      @SuppressWarnings("unchecked")
      Seq<Expression> list = (Seq<Expression>) (Seq<?>) project.projectList();
      expressions.add(0, list);
      inputs.add(0, project.child().output());
      node = project.child();
    }
    List<String> input =
        CollectionConverters.asJava(node.output()).stream().map(a -> a.name()).toList();
    if (!node.children().isEmpty() || !input.equals(INPUT_COLUMNS)) {
      throw new FoldException(
          "the record projection must read " + INPUT_COLUMNS + " directly, not\n" + plan);
    }
    return new RecordProjection(expressions, inputs, headers);
  }

  /** Evaluates the projection on one record; read the fields with the getters below. */
  @Override
  public void evaluate(ConsumerRecord<byte[], byte[]> record, long auditMicros) {
    if (projections == null) {
      // Mutable projections into rows that hold references: an UnsafeProjection would copy
      // key and value into an unsafe row at every level and copy them out again for the hash
      // and the lengths (a fifth of the fold's CPU in a JFR profile, docs/benchmarks.md).
      projections = new MutableProjection[expressions.size()];
      for (int i = 0; i < projections.length; i++) {
        projections[i] = MutableProjection.create(expressions.get(i), inputs.get(i));
        projections[i].target(new SpecificInternalRow(dataTypes(expressions.get(i))));
      }
      values = new Object[INPUT_COLUMNS.size()];
      row = new GenericInternalRow(values);
    }
    values[0] = record.key();
    values[1] = record.value();
    values[2] = record.partition();
    values[3] = record.offset();
    values[4] = timestampMicros(record);
    values[5] = headers ? headers(record) : null;
    values[6] = auditMicros;
    InternalRow current = row;
    for (MutableProjection projection : projections) {
      current = projection.apply(current);
    }
    out = current;
  }

  private static Seq<DataType> dataTypes(Seq<Expression> expressions) {
    List<DataType> types =
        CollectionConverters.asJava(expressions).stream().map(Expression::dataType).toList();
    return CollectionConverters.asScala(types).toSeq();
  }

  @Override
  public long bytes() {
    return out.getLong(0);
  }

  @Override
  public long dedupeKey() {
    return out.getLong(1);
  }

  @Override
  public boolean hasEventTime() {
    return !out.isNullAt(2);
  }

  @Override
  public long placedMs() {
    return out.getLong(3);
  }

  @Override
  public boolean hasLatency() {
    return !out.isNullAt(4);
  }

  @Override
  public double latencyMs() {
    return out.getDouble(4);
  }

  /** The timestamp column as Spark's Kafka source makes it (KafkaRecordToRowConverter). */
  private static long timestampMicros(ConsumerRecord<byte[], byte[]> record) {
    return DateTimeUtils.fromJavaTimestamp(new java.sql.Timestamp(record.timestamp()));
  }

  /**
   * The headers column as Spark's Kafka source makes it: an array of (key string, value
   * binary), null for a record without headers.
   */
  private static GenericArrayData headers(ConsumerRecord<byte[], byte[]> record) {
    Header[] all = record.headers().toArray();
    if (all.length == 0) {
      return null;
    }
    Object[] rows = new Object[all.length];
    for (int i = 0; i < all.length; i++) {
      rows[i] =
          new GenericInternalRow(
              new Object[] {UTF8String.fromString(all[i].key()), all[i].value()});
    }
    return new GenericArrayData(rows);
  }
}
