package dev.uatu.replication;

import dev.uatu.fold.FoldException;
import dev.uatu.fold.RangeFolds;
import dev.uatu.fold.TaskRows;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import org.apache.spark.sql.types.StructType;

/**
 * The replication job's copy, called from Python ({@code jobs/replication/writer.py}) through
 * py4j. Spark's Kafka source plans each micro-batch (its offsets, {@code maxOffsetsPerTrigger},
 * the checkpoint); {@link RangeCopier} tasks then move the planned offset ranges from the
 * source consumer to the destination producer as Kafka's own byte arrays. The records never
 * become Spark rows nor cross into Python: that row path costs more than the copy itself
 * (docs/benchmarks.md).
 *
 * <p>Why not Spark's own Kafka sink: in Spark 4.2 it cannot set the record timestamp
 * (SPARK-50160 is not in it), it reports no per-record ack, and a retried task re-sends what
 * the failed attempt already wrote. Each task here first reads the destination's tail, so task
 * retries, executor loss and driver restarts all leave exactly one copy.
 */
public final class ReplicationSink {
  private ReplicationSink() {}

  /**
   * Builds the sink's producer and destination consumer once, here on the driver: a client
   * setting the Java client refuses fails the job before any record moves, not in every task.
   * In local mode the clients are the ones the tasks then use.
   */
  public static void checkDestinationClients(CopyConfig config) {
    Clients.producer(config.producerConfig);
    Clients.giveBack(config.consumerConfig, Clients.borrowConsumer(config.consumerConfig));
  }

  /** Builds the source consumer once on the driver, as {@link #checkDestinationClients}. */
  public static void checkSourceClient(CopyConfig config) {
    Clients.giveBack(
        config.sourceConsumerConfig, Clients.borrowConsumer(config.sourceConsumerConfig));
  }

  /**
   * Copies {@code ranges}, packed into about one Spark task per slot ({@link #packed}), and
   * returns the summary rows in {@code summarySchemaDdl} as a local Dataset. The copy runs now,
   * once ({@link TaskRows#collect}).
   */
  public static Dataset<Row> copyRanges(
      SparkSession spark, List<SourceRange> ranges, CopyConfig config, String summarySchemaDdl) {
    return copy(spark, ranges, config, Map.of(), summarySchemaDdl);
  }

  /**
   * {@link #copyRanges} for a copy of many topics: each range names its source topic, and
   * {@code routes} (source topic -> its copy's config) sends it to that topic's destination.
   */
  public static Dataset<Row> copyTopicRanges(
      SparkSession spark,
      List<SourceRange> ranges,
      Map<String, CopyConfig> routes,
      String summarySchemaDdl) {
    return copy(spark, ranges, null, routes, summarySchemaDdl);
  }

  private static Dataset<Row> copy(
      SparkSession spark,
      List<SourceRange> ranges,
      CopyConfig single,
      Map<String, CopyConfig> routes,
      String summarySchemaDdl) {
    List<ArrayList<SourceRange>> packs = packed(ranges, spark.sparkContext().defaultParallelism());
    List<Row> summaries =
        TaskRows.collect(spark, packs, new RangeCopier(single, routes, packs.size()));
    return spark.createDataFrame(summaries, StructType.fromDDL(summarySchemaDdl));
  }

  /**
   * The ranges as copy tasks, as the folds pack theirs ({@link RangeFolds#packed}): about one
   * per slot, a busy partition alone; each partition is in one task, so its records are sent
   * in order by one producer thread.
   */
  static List<ArrayList<SourceRange>> packed(List<SourceRange> ranges, int slots) {
    return RangeFolds.packed(
        ranges, r -> r.untilOffset - r.fromOffset, slots, RangeFolds.RECORDS_PER_TASK);
  }

  /**
   * The source offset ranges Spark's Kafka source planned for the micro-batch {@code batch},
   * as a foreachBatch function receives it, in no particular order (Python's {@code
   * ranges.batch_ranges} orders them). Found in the batch's RDD lineage (foreachBatch hands
   * over an RDD-backed frame); reading them reads no record. {@code topic} null: the ranges
   * of every topic the batch reads, each naming its topic (a copy of many topics).
   */
  public static List<SourceRange> batchRanges(Dataset<Row> batch, String topic) {
    List<SourceRange> ranges = new ArrayList<>();
    try {
      for (KafkaOffsetRange range : RangeFolds.kafkaRanges(batch, topic)) {
        ranges.add(
            new SourceRange(
                topic == null ? range.topic() : null,
                range.partition(),
                range.fromOffset(),
                range.untilOffset()));
      }
    } catch (FoldException notKafka) {
      throw new ReplicationWriteException(notKafka.getMessage(), notKafka);
    }
    return ranges;
  }
}
