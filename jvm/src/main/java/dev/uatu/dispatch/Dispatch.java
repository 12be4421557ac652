package dev.uatu.dispatch;

import dev.uatu.fold.TaskRows;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;

/**
 * The dispatcher job's JVM side, called from Python ({@code jobs/dispatch/dispatcher.py})
 * through py4j.
 *
 * <p>Why the records are dispatched here and not in Python: on this project's 2-core machine a
 * grpc-java client with async unary calls made 5,800-8,900 calls/s against the Go sink while a
 * Python grpc.aio client with the same concurrency (64) made 2,800 (both measured side by
 * side, see docs/dispatch.md); and, as for the replication job, Spark's row path would add its
 * own cost on top. Here records go from a Kafka consumer to a gRPC call as byte arrays and never
 * become Spark rows or cross into Python.
 */
public final class Dispatch {
  private Dispatch() {}

  /**
   * Dispatches {@code ranges} (one Spark task each) now, once, and returns the summary rows
   * ({@link DispatchStats#SCHEMA}) as a local Dataset ({@link TaskRows#collect}).
   */
  public static Dataset<Row> dispatch(SparkSession spark, List<Range> ranges, String configJson) {
    DispatchConfig config = DispatchConfig.fromJson(configJson);
    List<Row> rows = TaskRows.collect(spark, ranges, new RangeDispatcher(config));
    return spark.createDataFrame(rows, StructType.fromDDL(DispatchStats.SCHEMA));
  }

  /** Builds the group's channels and producer on the driver: a setting the gRPC or Kafka
   * client refuses fails here, before any record moves. Then connects the channels (up to 10 s;
   * false if the service did not answer by then). */
  public static boolean check(String configJson) throws InterruptedException {
    return GroupRuntime.of(DispatchConfig.fromJson(configJson)).connect(10_000);
  }

  /** Warms this JVM's dispatch clients before any group needs them (GroupRuntime.warmUp,
   * waiting at most {@code timeoutMs} for its refused connection). */
  public static void warmUp(long timeoutMs) throws InterruptedException {
    GroupRuntime.warmUp(timeoutMs);
  }

  /** The end offsets now of every partition of {@code topic} (with read_committed in the
   * config: the last stable offsets), as the driver's bounded runs capture them. */
  public static Map<Integer, Long> endOffsets(Map<String, String> consumerConfig, String topic) {
    Properties props = new Properties();
    props.putAll(consumerConfig);
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> partitions = new ArrayList<>();
      for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
        partitions.add(new TopicPartition(topic, info.partition()));
      }
      Map<Integer, Long> ends = new HashMap<>();
      consumer
          .endOffsets(partitions, Duration.ofSeconds(30))
          .forEach((tp, offset) -> ends.put(tp.partition(), offset));
      return ends;
    }
  }

  /**
   * Closes one JobGroup's dispatch clients in this JVM at the end of its run (its channels,
   * producer and threads; and the idle pooled consumers, which the next task opens again).
   * The other groups a worker application runs in this JVM keep theirs.
   */
  public static void close(String jobGroupId) {
    GroupRuntime.closeGroup(jobGroupId);
    RangeDispatcher.closeIdleConsumers();
  }

  /** The JobGroups whose dispatch clients are open in this JVM, sorted. */
  public static List<String> openGroups() {
    return GroupRuntime.openGroups();
  }

  // --- the routing rules, exposed for the test that checks them against routing.py ---------

  public static String responseCode(String configJson, String status, String trailer, boolean overdue) {
    return new Routing(DispatchConfig.fromJson(configJson))
        .responseCode(status, trailer, overdue)
        .name();
  }

  public static String afterTimeout(
      String configJson, String kind, long timeoutCount, boolean dlqToken) {
    BooleanSupplier token = () -> dlqToken;
    return new Routing(DispatchConfig.fromJson(configJson))
        .afterTimeout(Routing.Kind.valueOf(kind), timeoutCount, token)
        .name();
  }

  public static String destination(String configJson, String code, long retryCount) {
    return new Routing(DispatchConfig.fromJson(configJson))
        .destination(Routing.Code.valueOf(code), retryCount);
  }

  public static String holRule(String configJson, String kind) {
    Routing.HolRule rule =
        new Routing(DispatchConfig.fromJson(configJson)).holRule(Routing.Kind.valueOf(kind));
    return rule == null ? "" : rule.code().name() + ":" + rule.cost();
  }

  public static long timeoutMs(String configJson, long timeoutCount) {
    return DispatchConfig.fromJson(configJson).timeoutMs(timeoutCount);
  }

  public static byte[] encodeDlqMetadata(
      long retryCount, String topic, int partition, long offset, long timestampMs, byte[] data,
      long timeoutCount) {
    return new DlqMetadata(retryCount, topic, partition, offset, timestampMs, data, timeoutCount)
        .encode();
  }

  /** [retry_count, partition, offset, timestamp, timeout_count] and the topic and data, or
   * null for bytes that are not a DLQMetadata. */
  public static Object[] decodeDlqMetadata(byte[] key) {
    DlqMetadata m = DlqMetadata.decode(key);
    if (m == null) {
      return null;
    }
    return new Object[] {
      m.retryCount, m.topic, m.partition, m.offset, m.timestampMs, m.data, m.timeoutCount
    };
  }
}
