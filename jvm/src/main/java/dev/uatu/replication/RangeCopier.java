package dev.uatu.replication;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The copy of a task's source offset ranges, one per partition, in one micro-batch (one Spark
 * task; {@link ReplicationSink} packs the batch's ranges into about one task per slot).
 *
 * <ol>
 *   <li>Reads the tails of the destination partitions ({@link DestinationTail}) and finds the
 *       highest source offset already stamped in each.
 *   <li>Reads the ranges from the source with one byte-array consumer, whose fetches carry every
 *       partition still being read, and sends every newer record to its destination partition
 *       ({@link PartitionCopy}): key, value, headers and the source timestamp as they came,
 *       plus the encoded-format headers if any and the {@link Provenance} stamp (cluster,
 *       topic, partition, offset), at the pace the JobGroup's flow control allows ({@link
 *       FlowLimiter}). The records stay Kafka's own objects from consumer to producer, as in
 *       MirrorMaker 2; they never become Spark rows. Each partition's records are sent in offset
 *       order.
 *   <li>Waits for its records' acks; any failed delivery fails the task, so the batch is
 *       replayed rather than a record lost. Returns one summary row per partition and window of
 *       source timestamps.
 * </ol>
 */
final class RangeCopier implements FlatMapFunction<Iterator<ArrayList<SourceRange>>, Row> {
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
  public Iterator<Row> call(Iterator<ArrayList<SourceRange>> packs) {
    List<Row> summaries = new ArrayList<>();
    while (packs.hasNext()) {
      List<SourceRange> ranges = packs.next();
      if (!ranges.isEmpty()) {
        summaries.addAll(copy(ranges));
      }
    }
    return summaries.iterator();
  }

  private List<Row> copy(List<SourceRange> ranges) {
    long started = System.nanoTime();
    List<CopyConfig> configs = new ArrayList<>();
    ranges.forEach(range -> configs.add(route(range)));
    long[] doneUpTo = tails(ranges, configs);
    long scanned = System.nanoTime();
    List<PartitionCopy> copies = new ArrayList<>();
    for (int i = 0; i < ranges.size(); i++) {
      copies.add(new PartitionCopy(configs.get(i), ranges.get(i).partition, doneUpTo[i]));
    }
    AckTimes acks = new AckTimes();
    Map<Map<String, String>, List<Integer>> bySource = new LinkedHashMap<>();
    for (int i = 0; i < ranges.size(); i++) {
      bySource.computeIfAbsent(configs.get(i).sourceConsumerConfig, c -> new ArrayList<>()).add(i);
    }
    for (List<Integer> which : bySource.values()) {
      read(ranges, configs, copies, which, acks);
    }
    long sent = System.nanoTime();
    String what = ranges.size() == 1 ? ranges.get(0).toString() : ranges.size() + " ranges";
    awaitAcks(acks, what);
    long acked = System.nanoTime();
    long read = 0;
    long written = 0;
    for (PartitionCopy copy : copies) {
      read += copy.read();
      written += copy.sent();
    }
    LOG.info(
        "{}{} -> {}: read {} records, sent {} (the rest was there already) in {} ms "
            + "(tail scan {} ms, read and send {} ms, waiting for acks {} ms)",
        ranges.size() == 1 ? configs.get(0).sourceTopic : "",
        ranges.size() == 1 ? "[" + ranges.get(0) + "]" : ranges.size() + " ranges",
        ranges.size() == 1
            ? configs.get(0).destinationTopic + "[" + copies.get(0).destination + "]"
            : "their destinations",
        read,
        written,
        (acked - started) / 1_000_000,
        (scanned - started) / 1_000_000,
        (sent - scanned) / 1_000_000,
        (acked - sent) / 1_000_000);
    Set<Map<String, String>> producers = new HashSet<>();
    for (CopyConfig config : configs) {
      if (producers.add(config.producerConfig)) {
        failOnDeliveryErrors(config, Clients.producer(config.producerConfig), acks, what);
      }
    }
    List<Row> rows = new ArrayList<>();
    copies.forEach(copy -> rows.addAll(copy.rows(acks)));
    return rows;
  }

  /** What each range's destination partition holds already ({@link DestinationTail}). */
  private static long[] tails(List<SourceRange> ranges, List<CopyConfig> configs) {
    long[] doneUpTo = new long[ranges.size()];
    Map<Map<String, String>, List<Integer>> byDestination = new LinkedHashMap<>();
    for (int i = 0; i < ranges.size(); i++) {
      byDestination.computeIfAbsent(configs.get(i).consumerConfig, c -> new ArrayList<>()).add(i);
    }
    for (Map.Entry<Map<String, String>, List<Integer>> e : byDestination.entrySet()) {
      List<CopyConfig> theirs = new ArrayList<>();
      List<Integer> partitions = new ArrayList<>();
      for (int i : e.getValue()) {
        theirs.add(configs.get(i));
        partitions.add(ranges.get(i).partition);
      }
      KafkaConsumer<byte[], byte[]> tail = Clients.borrowConsumer(e.getKey());
      long[] found;
      try {
        found = DestinationTail.replicatedUpTo(tail, theirs, partitions);
      } finally {
        Clients.giveBack(e.getKey(), tail);
      }
      for (int k = 0; k < found.length; k++) {
        doneUpTo[e.getValue().get(k)] = found[k];
      }
    }
    return doneUpTo;
  }

  /**
   * Reads the ranges {@code which} (of one source consumer configuration) with one consumer
   * and copies their records; every partition still being read is in each fetch.
   */
  private void read(
      List<SourceRange> ranges,
      List<CopyConfig> configs,
      List<PartitionCopy> copies,
      List<Integer> which,
      AckTimes acks) {
    Map<String, String> consumerConfig = configs.get(which.get(0)).sourceConsumerConfig;
    long timeoutNanos = configs.get(which.get(0)).sourceTimeoutMs * 1_000_000L;
    Map<TopicPartition, Integer> index = new HashMap<>();
    for (int i : which) {
      SourceRange range = ranges.get(i);
      index.put(new TopicPartition(configs.get(i).sourceTopic, range.partition), i);
    }
    Map<String, FlowLimiter> limiters = new HashMap<>(); // by flow key: one share each
    Map<String, CopyConfig> joined = new HashMap<>();
    KafkaConsumer<byte[], byte[]> source = Clients.borrowConsumer(consumerConfig);
    try {
      for (int i : which) {
        CopyConfig config = configs.get(i);
        if (!joined.containsKey(config.flowKey)) {
          joined.put(config.flowKey, config);
          limiters.put(config.flowKey, config.joinFlow(tasks));
        }
      }
      source.assign(index.keySet());
      Set<TopicPartition> reading = new HashSet<>();
      for (Map.Entry<TopicPartition, Integer> e : index.entrySet()) {
        SourceRange range = ranges.get(e.getValue());
        source.seek(e.getKey(), range.fromOffset);
        if (range.fromOffset < range.untilOffset) {
          reading.add(e.getKey());
        }
      }
      long quietSince = System.nanoTime();
      while (!reading.isEmpty() && !acks.failed()) {
        ConsumerRecords<byte[], byte[]> polled = source.poll(POLL);
        long readMs = System.currentTimeMillis();
        boolean any = false;
        for (TopicPartition tp : polled.partitions()) {
          int i = index.get(tp);
          SourceRange range = ranges.get(i);
          CopyConfig config = configs.get(i);
          KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
          for (ConsumerRecord<byte[], byte[]> record : polled.records(tp)) {
            if (record.offset() >= range.untilOffset) {
              break; // the next batch's
            }
            copies.get(i).copy(record, readMs, producer, acks, limiters.get(config.flowKey));
            any = true;
          }
        }
        Set<TopicPartition> done = new HashSet<>();
        for (TopicPartition tp : reading) {
          if (source.position(tp) >= ranges.get(index.get(tp)).untilOffset) {
            done.add(tp);
          }
        }
        reading.removeAll(done);
        source.pause(done); // the next fetches carry the partitions still being read
        if (any) {
          // From the end of the records just copied: time spent waiting for the flow control
          // is not silence of the source.
          quietSince = System.nanoTime();
        } else if (!reading.isEmpty() && System.nanoTime() - quietSince > timeoutNanos) {
          // Spark planned these ranges from offsets the broker reported, so the records
          // exist; a source that stops answering fails the task rather than stalling the batch.
          TopicPartition tp = reading.iterator().next();
          throw new ReplicationWriteException(
              "no record of " + tp + " came in " + configs.get(which.get(0)).sourceTimeoutMs
                  + " ms at offset " + source.position(tp) + " (the batch reads up to "
                  + ranges.get(index.get(tp)).untilOffset + ")"
                  + (reading.size() > 1 ? "; " + (reading.size() - 1) + " more wait" : ""));
        }
      }
    } finally {
      joined.forEach((key, config) -> config.leaveFlow(limiters.get(key), tasks));
      Clients.giveBack(consumerConfig, source); // unassigned, so none stays paused
    }
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
