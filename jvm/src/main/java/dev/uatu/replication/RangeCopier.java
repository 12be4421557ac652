package dev.uatu.replication;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The copy of one source partition's offset range in one micro-batch (one Spark task).
 *
 * <ol>
 *   <li>Reads the tail of the destination partition ({@link DestinationTail}) and finds the
 *       highest source offset already stamped there.
 *   <li>Reads the range from the source with a byte-array consumer and sends every newer
 *       record to the destination partition ({@link PartitionCopy}): key, value, headers and
 *       the source timestamp as they came, plus the encoded-format headers if any and the
 *       {@link Provenance} stamp (cluster, topic, partition, offset), at the pace the JobGroup's
 *       flow control allows ({@link FlowLimiter}). The records stay Kafka's own objects from
 *       consumer to producer, as in MirrorMaker 2; they never become Spark rows.
 *   <li>Waits for its records' acks; any failed delivery fails the task, so the batch is replayed rather than a
 *       record lost. Returns one summary row per window of source timestamps.
 * </ol>
 */
final class RangeCopier implements FlatMapFunction<Iterator<SourceRange>, Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(RangeCopier.class);
  private static final Duration POLL = Duration.ofMillis(200);
  // Longer than any delivery.timeout.ms the job sets (120 s): past it the producer is stuck.
  static final long ACK_TIMEOUT_MS = 300_000;

  private final CopyConfig single; // a copy of one topic: every range's
  private final HashMap<String, CopyConfig> routes; // many topics: source topic -> its copy's
  private final int tasks; // of the job: each takes its share of the flow control

  RangeCopier(CopyConfig single, Map<String, CopyConfig> routes, int tasks) {
    this.single = single;
    this.routes = new HashMap<>(routes);
    this.tasks = tasks;
  }

  /** The config of {@code range}'s copy: its topic's route, or the single one. */
  private CopyConfig route(SourceRange range) {
    if (range.topic == null) {
      return single;
    }
    CopyConfig config = routes.get(range.topic);
    if (config == null) {
      throw new ReplicationWriteException(
          "source topic " + range.topic + " has no destination (the copy covers "
              + routes.keySet() + ")");
    }
    return config;
  }

  @Override
  public Iterator<Row> call(Iterator<SourceRange> ranges) {
    List<Row> summaries = new ArrayList<>();
    while (ranges.hasNext()) {
      summaries.addAll(copy(ranges.next()));
    }
    return summaries.iterator();
  }

  private List<Row> copy(SourceRange range) {
    long started = System.nanoTime();
    CopyConfig config = route(range);
    long doneUpTo;
    KafkaConsumer<byte[], byte[]> tail = Clients.borrowConsumer(config.consumerConfig);
    try {
      doneUpTo = DestinationTail.replicatedUpTo(tail, config, range.partition);
    } finally {
      Clients.giveBack(config.consumerConfig, tail);
    }
    long scanned = System.nanoTime();
    PartitionCopy partition = new PartitionCopy(config, range.partition, doneUpTo);
    KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
    AckTimes acks = new AckTimes();
    TopicPartition tp = new TopicPartition(config.sourceTopic, range.partition);
    KafkaConsumer<byte[], byte[]> source = Clients.borrowConsumer(config.sourceConsumerConfig);
    FlowLimiter limiter = config.joinFlow(tasks);
    try {
      source.assign(List.of(tp));
      source.seek(tp, range.fromOffset);
      long quietSince = System.nanoTime();
      while (source.position(tp) < range.untilOffset && !acks.failed()) {
        List<ConsumerRecord<byte[], byte[]>> records = source.poll(POLL).records(tp);
        long readMs = System.currentTimeMillis();
        if (records.isEmpty()) {
          // Spark planned this range from offsets the broker reported, so the records exist;
          // a source that stops answering fails the task rather than stalling the batch.
          if (System.nanoTime() - quietSince > config.sourceTimeoutMs * 1_000_000L) {
            throw new ReplicationWriteException(
                "no record of " + tp + " came in " + config.sourceTimeoutMs + " ms at offset "
                    + source.position(tp) + " (the batch reads up to " + range.untilOffset + ")");
          }
          continue;
        }
        for (ConsumerRecord<byte[], byte[]> record : records) {
          if (record.offset() >= range.untilOffset) {
            break; // the next batch's
          }
          partition.copy(record, readMs, producer, acks, limiter);
        }
        // From the end of the records just copied: time spent waiting for the flow control
        // is not silence of the source.
        quietSince = System.nanoTime();
      }
    } finally {
      config.leaveFlow(limiter, tasks);
      Clients.giveBack(config.sourceConsumerConfig, source);
    }
    long sent = System.nanoTime();
    awaitAcks(acks, range.toString());
    long acked = System.nanoTime();
    LOG.info(
        "{}[{}] -> {}[{}]: read {} records, sent {} (the rest was there already) in {} ms "
            + "(tail scan {} ms, read and send {} ms, waiting for acks {} ms)",
        config.sourceTopic,
        range,
        config.destinationTopic,
        partition.destination,
        partition.read(),
        partition.sent(),
        (acked - started) / 1_000_000,
        (scanned - started) / 1_000_000,
        (sent - scanned) / 1_000_000,
        (acked - sent) / 1_000_000);
    failOnDeliveryErrors(config, producer, acks, "partition " + range.partition);
    return partition.rows(acks);
  }

  /** Waits for every ack of the task's records; ReplicationWriteException past the timeout. */
  static void awaitAcks(AckTimes acks, String what) {
    try {
      if (!acks.awaitAll(ACK_TIMEOUT_MS)) {
        throw new ReplicationWriteException(
            "the producer did not complete the records of " + what + " in " + ACK_TIMEOUT_MS
                + " ms");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // a killed task: Spark replays the batch
      throw new ReplicationWriteException("interrupted waiting for acks of " + what, e);
    }
  }

  /**
   * Fails the task when a delivery failed: the batch is replayed rather than a record lost. The
   * producer is dropped, so the retry starts from a fresh one.
   */
  static void failOnDeliveryErrors(
      CopyConfig config, KafkaProducer<byte[], byte[]> producer, AckTimes acks, String what) {
    if (acks.failed()) {
      Clients.discardProducer(config.producerConfig, producer);
      throw new ReplicationWriteException(
          acks.failures() + " records of " + what + " were not written to "
              + config.destinationTopic + ": " + acks.firstError(),
          acks.firstError());
    }
  }
}
