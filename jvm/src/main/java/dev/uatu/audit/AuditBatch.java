package dev.uatu.audit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.uatu.fold.FoldException;
import dev.uatu.fold.FoldFactory;
import dev.uatu.fold.FoldRange;
import dev.uatu.fold.RangeFolds;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;

/**
 * The audit job's data path, called from Python ({@code jobs/audit/fold.py}) once per
 * micro-batch. Spark's Kafka source plans the batch (its offsets, maxOffsetsPerTrigger, the
 * checkpoint); {@link AuditFold}s, one per topic partition, packed into a few tasks ({@link
 * RangeFolds}), read the planned ranges with a byte-array consumer and fold them into
 * per-window partial aggregates.
 * No record becomes a Spark row or crosses into Python: the few rows per window are what the
 * counts MERGE reads.
 */
public final class AuditBatch {
  private static final ObjectMapper JSON = new ObjectMapper();

  private AuditBatch() {}

  public static String rowSchema() {
    return AuditFold.ROW_SCHEMA;
  }

  /** The schema of the DataFrame a record projection is built from (see RecordProjection). */
  public static String projectionInputSchema() {
    return RecordProjection.INPUT_SCHEMA;
  }

  /**
   * The offset ranges Spark's Kafka source planned for {@code batch} of {@code topic} (null: of
   * every topic, a job that audits many); reads no record.
   */
  public static List<FoldRange> planned(Dataset<Row> batch, String topic) {
    return RangeFolds.planned(batch, topic);
  }

  /**
   * The micro-batch's timestamp (epoch ms) as the query's offset log stores it: what
   * {@code current_timestamp()} is in that batch, the same when the batch is replayed.
   */
  public static long batchTimestampMs(SparkSession spark, String checkpoint, long batchId)
      throws IOException {
    Path file = new Path(new Path(checkpoint, "offsets"), Long.toString(batchId));
    FileSystem fs = file.getFileSystem(spark.sparkContext().hadoopConfiguration());
    try (BufferedReader in =
        new BufferedReader(new InputStreamReader(fs.open(file), StandardCharsets.UTF_8))) {
      String version = in.readLine();
      String metadata = in.readLine();
      if (version == null || !version.startsWith("v") || metadata == null) {
        throw new FoldException("unexpected offset log entry " + file);
      }
      JsonNode time = JSON.readTree(metadata).get("batchTimestampMs");
      if (time == null || !time.canConvertToLong()) {
        throw new FoldException("no batchTimestampMs in " + file + ": " + metadata);
      }
      return time.asLong();
    }
  }

  /**
   * The fold's settings: audit types with their window lengths, allowed lateness (negative:
   * each window's length), HLL precision, how a record's fields are computed and where exact
   * audits keep their keys. The fields: {@code projected}, a frame over {@link
   * #projectionInputSchema} selecting bytes, dedupe_key, event_ms, placed_ms, latency_ms
   * ({@link RecordProjection}); or, when {@code kafkaTimestampDefaults} (event time = the Kafka
   * timestamp, dedupe key = key and value), the same computed directly ({@link
   * KafkaTimestampFields}, with {@code maxFutureSkewSeconds}; {@code projected} may then be
   * null). Exact audits drop a window's keys once its end is {@code keyRetentionSeconds} (at
   * least its lateness) behind the partition's watermark. {@code keysPerTopic}: a job that
   * audits many topics keeps each one's keys apart ({@link FoldSettings#keysDirOf}).
   */
  public static FoldSettings settings(
      SparkSession spark,
      List<String> auditTypes,
      List<Integer> intervalSeconds,
      long latenessSeconds,
      int hllLgConfigK,
      Dataset<Row> projected,
      boolean headers,
      boolean kafkaTimestampDefaults,
      long maxFutureSkewSeconds,
      String keysDir,
      long keyRetentionSeconds,
      boolean keysPerTopic) {
    RecordFields fields =
        kafkaTimestampDefaults
            ? new KafkaTimestampFields(maxFutureSkewSeconds * 1000L)
            : RecordProjection.of(projected, headers);
    return FoldSettings.of(
        auditTypes,
        intervalSeconds,
        latenessSeconds,
        hllLgConfigK,
        fields,
        keysDir,
        keyRetentionSeconds,
        keysPerTopic,
        spark.sparkContext().hadoopConfiguration());
  }

  /** Which way {@code settings} computes a record's fields: "kafka_timestamp" or "projection". */
  public static String fieldsKind(FoldSettings settings) {
    return settings.fields instanceof KafkaTimestampFields ? "kafka_timestamp" : "projection";
  }

  /**
   * Folds {@code ranges} now, once (a fold per range, {@link RangeFolds#packed} into tasks),
   * and returns every row the folds gave
   * ({@link #rowSchema}) as a local Dataset: the per-window partials, then one summary row per
   * range. The exact audits' keys of batch {@code batchId} are written when this returns.
   */
  public static Dataset<Row> fold(
      SparkSession spark,
      List<FoldRange> ranges,
      Map<String, String> consumerConfig,
      FoldSettings settings,
      long batchId,
      long auditMs,
      long timeoutMs) {
    FoldFactory factory = range -> new AuditFold(settings, range, batchId, auditMs);
    List<Row> rows = RangeFolds.fold(spark, ranges, consumerConfig, factory, timeoutMs);
    return spark.createDataFrame(rows, StructType.fromDDL(AuditFold.ROW_SCHEMA));
  }

  /** Drops the exact keys this JVM keeps in memory for {@code keysDir} (the job ends). */
  public static void release(String keysDir) {
    PartitionKeys.release(keysDir);
  }
}
