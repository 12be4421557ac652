package dev.uatu.fold;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.function.ToLongFunction;
import org.apache.spark.Partition;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDD;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDDPartition;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Folds of Spark-planned Kafka offset ranges in JVM tasks: the way a job reads a topic at the
 * pace of a plain Kafka consumer. Spark's Kafka source still plans every micro-batch (its
 * offsets, {@code maxOffsetsPerTrigger}, the checkpoint) but the batch's rows are never read;
 * instead tasks read the ranges with byte-array consumers ({@link RangeReader}) and a
 * {@link RecordFold} turns its records into a few partial-aggregate rows. No record becomes a
 * Spark row or crosses into Python, so the fold is not bound by Spark's Kafka-to-row conversion
 * (docs/loadgen.md, "How it reads"). Ranges are packed into as few tasks as keep every slot
 * busy ({@link #packed}), each read by one consumer whose fetches carry all its partitions,
 * so a batch of thousands of quiet topic partitions costs a few tasks, not thousands.
 *
 * <p>Called from Python through py4j ({@code jobs/loadgen/measure.py} for LOAD_GEN_CONSUME,
 * {@code jobs/audit/fold.py} for the audit job); the replication job's copy
 * ({@code dev.uatu.replication}) is driven the same way.
 */
public final class RangeFolds {
  /** A range whose partition stays silent this long fails its task. */
  public static final long DEFAULT_TIMEOUT_MS = 120_000;

  /** Records past which a batch gets more tasks than slots ({@link #packed}). */
  public static final long RECORDS_PER_TASK = 1_000_000;

  private RangeFolds() {}

  /**
   * Folds the ranges in Spark tasks ({@link #packed}: several ranges to a task when there are
   * more ranges than slots), now, and returns the folds' rows ({@link TaskRows#collect}).
   */
  public static List<Row> fold(
      SparkSession spark,
      List<FoldRange> ranges,
      Map<String, String> consumerConfig,
      FoldFactory factory,
      long timeoutMs) {
    List<ArrayList<FoldRange>> packs =
        packed(ranges, spark.sparkContext().defaultParallelism(), RECORDS_PER_TASK);
    return TaskRows.collect(spark, packs, new FoldTask(consumerConfig, factory, timeoutMs));
  }

  /**
   * The ranges as Spark tasks: one task per slot, more when a task would otherwise read more
   * than {@code recordsPerTask} records, never more than one per range. Each range, biggest
   * first, goes to the task with the fewest records so far, so a busy partition gets a task to
   * itself while thousands of quiet ones share a few (a task per range costs a task's launch
   * and a consumer round trip per partition: thousands of topics would not fit a trigger).
   * Within a task, ranges keep the order given.
   */
  public static List<ArrayList<FoldRange>> packed(
      List<FoldRange> ranges, int slots, long recordsPerTask) {
    return packed(ranges, r -> r.untilOffset - r.fromOffset, slots, recordsPerTask);
  }

  /** {@link #packed(List, int, long)} for any kind of range, {@code records} its size. */
  public static <T> List<ArrayList<T>> packed(
      List<T> ranges, ToLongFunction<T> records, int slots, long recordsPerTask) {
    long total = 0;
    for (T r : ranges) {
      total += records.applyAsLong(r);
    }
    long needed = Math.max(slots, (total + recordsPerTask - 1) / Math.max(1, recordsPerTask));
    int tasks = (int) Math.min(ranges.size(), needed);
    List<Integer> order = new ArrayList<>();
    for (int i = 0; i < ranges.size(); i++) {
      order.add(i);
    }
    order.sort(
        Comparator.comparingLong((Integer i) -> -records.applyAsLong(ranges.get(i)))
            .thenComparingInt(i -> i));
    long[] load = new long[tasks];
    List<List<Integer>> members = new ArrayList<>();
    for (int t = 0; t < tasks; t++) {
      members.add(new ArrayList<>());
    }
    for (int i : order) {
      int lightest = 0;
      for (int t = 1; t < tasks; t++) {
        if (load[t] < load[lightest]) {
          lightest = t;
        }
      }
      members.get(lightest).add(i);
      load[lightest] += records.applyAsLong(ranges.get(i));
    }
    List<ArrayList<T>> packs = new ArrayList<>();
    for (List<Integer> task : members) {
      task.sort(Comparator.naturalOrder());
      ArrayList<T> pack = new ArrayList<>();
      task.forEach(i -> pack.add(ranges.get(i)));
      packs.add(pack);
    }
    return packs;
  }

  /**
   * The offset ranges Spark's Kafka source planned for the micro-batch {@code batch} of
   * {@code topic} (null: of every topic it reads, for a job that subscribes to many), as a
   * foreachBatch function receives it; reading them reads no record. One range per topic
   * partition with records, in (topic, partition) order: a partition the source split
   * (minPartitions) is joined again, since a fold reads its partition in offset order.
   */
  public static List<FoldRange> planned(Dataset<Row> batch, String topic) {
    List<FoldRange> ranges = new ArrayList<>();
    for (KafkaOffsetRange range : kafkaRanges(batch, topic)) {
      ranges.add(
          new FoldRange(range.topic(), range.partition(), range.fromOffset(), range.untilOffset()));
    }
    return joined(ranges);
  }

  /**
   * Spark's own offset ranges of the micro-batch {@code batch} of {@code topic}, as planned, in
   * no particular order. Found in the batch's RDD lineage (foreachBatch hands over an RDD-backed
   * frame). Throws {@link FoldException} when the batch reads anything but {@code topic}
   * (null: any topic).
   * The replication copy plans its tasks from these too.
   */
  public static List<KafkaOffsetRange> kafkaRanges(Dataset<Row> batch, String topic) {
    RDD<?> rows = ((org.apache.spark.sql.classic.Dataset<Row>) batch).queryExecution().toRdd();
    List<KafkaOffsetRange> ranges = new ArrayList<>();
    boolean found = false;
    Deque<RDD<?>> lineage = new ArrayDeque<>(List.of(rows));
    while (!lineage.isEmpty()) {
      RDD<?> rdd = lineage.pop();
      if (!(rdd instanceof DataSourceRDD)) {
        CollectionConverters.asJava(rdd.dependencies()).forEach(d -> lineage.push(d.rdd()));
        continue;
      }
      found = true;
      for (Partition partition : rdd.partitions()) {
        Option<InputPartition> input = ((DataSourceRDDPartition) partition).inputPartition();
        if (input.isEmpty()) {
          continue;
        }
        if (!(input.get() instanceof KafkaBatchInputPartition kafka)) {
          throw new FoldException(
              "the micro-batch reads " + input.get() + ", not a Kafka offset range of " + topic);
        }
        KafkaOffsetRange range = kafka.offsetRange();
        if (topic != null && !range.topic().equals(topic)) {
          throw new FoldException("the micro-batch reads topic " + range.topic() + ", not " + topic);
        }
        ranges.add(range);
      }
    }
    if (!found) {
      throw new FoldException(
          "the micro-batch has no Kafka source in its lineage: " + rows.toDebugString());
    }
    return ranges;
  }

  /**
   * Adjoining ranges of a topic partition as one, in (topic, partition) order, empty ones left
   * out.
   */
  static List<FoldRange> joined(List<FoldRange> ranges) {
    List<FoldRange> sorted = new ArrayList<>(ranges);
    sorted.sort(
        Comparator.comparing(FoldRange::topic)
            .thenComparingInt(FoldRange::partition)
            .thenComparingLong(FoldRange::fromOffset));
    List<FoldRange> out = new ArrayList<>();
    for (FoldRange r : sorted) {
      FoldRange last = out.isEmpty() ? null : out.get(out.size() - 1);
      if (last != null && last.partition == r.partition && last.topic.equals(r.topic)) {
        if (last.untilOffset != r.fromOffset) {
          throw new FoldException("planned ranges " + last + " and " + r + " do not adjoin");
        }
        out.set(out.size() - 1, new FoldRange(r.topic, r.partition, last.fromOffset, r.untilOffset));
      } else {
        out.add(r);
      }
    }
    out.removeIf(r -> r.fromOffset == r.untilOffset);
    return out;
  }
}
