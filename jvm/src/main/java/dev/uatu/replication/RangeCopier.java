package dev.uatu.replication;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
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
 *       record to the destination partition: key, value, headers and the source timestamp as
 *       they came, plus the encoded-format headers if any and the {@link Provenance}
 *       stamp (cluster, topic, partition, offset). The records stay Kafka's own objects from consumer to producer, as in
 *       MirrorMaker 2; they never become Spark rows.
 *   <li>Waits for its records' acks; any failed delivery fails the task, so the batch is replayed rather than a
 *       record lost. Returns one summary row per window of source timestamps.
 * </ol>
 */
final class RangeCopier implements FlatMapFunction<Iterator<SourceRange>, Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(RangeCopier.class);
  private static final Duration POLL = Duration.ofMillis(200);
  // Longer than any delivery.timeout.ms the job sets (120 s): past it the producer is stuck.
  private static final long ACK_TIMEOUT_MS = 300_000;

  private final CopyConfig config;

  RangeCopier(CopyConfig config) {
    this.config = config;
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
    int destination = config.destinationPartition(range.partition);
    long doneUpTo;
    KafkaConsumer<byte[], byte[]> tail = Clients.borrowConsumer(config.consumerConfig);
    try {
      doneUpTo = DestinationTail.replicatedUpTo(tail, config, range.partition);
    } finally {
      Clients.giveBack(config.consumerConfig, tail);
    }
    long scanned = System.nanoTime();
    Header[] fixed = fixedHeaders();
    Provenance provenance = new Provenance(config.sourceCluster, config.sourceTopic, range.partition);
    KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
    AckTimes acks = new AckTimes();
    WindowSummaries summaries = new WindowSummaries(config.auditIntervalMs);
    TopicPartition tp = new TopicPartition(config.sourceTopic, range.partition);
    KafkaConsumer<byte[], byte[]> source = Clients.borrowConsumer(config.sourceConsumerConfig);
    long read = 0;
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
        quietSince = System.nanoTime();
        for (ConsumerRecord<byte[], byte[]> record : records) {
          long offset = record.offset();
          if (offset >= range.untilOffset) {
            break; // the next batch's
          }
          read++;
          long timestampMs =
              record.timestampType() == TimestampType.NO_TIMESTAMP_TYPE ? -1 : record.timestamp();
          int keyBytes = record.key() == null ? 0 : record.key().length;
          int valueBytes = record.value() == null ? 0 : record.value().length;
          if (offset > doneUpTo) {
            int ackIndex = acks.count();
            producer.send(
                new ProducerRecord<>(
                    config.destinationTopic,
                    destination,
                    timestampMs < 0 ? null : timestampMs, // none: the destination stamps it
                    record.key(),
                    record.value(),
                    stamped(record.headers(), fixed, provenance.stamp(offset))),
                acks.next());
            summaries.add(offset, timestampMs, readMs, keyBytes, valueBytes, ackIndex);
          } else {
            summaries.add(offset, timestampMs, readMs, keyBytes, valueBytes, -1);
          }
        }
      }
    } finally {
      Clients.giveBack(config.sourceConsumerConfig, source);
    }
    long sent = System.nanoTime();
    awaitAcks(acks, range);
    long acked = System.nanoTime();
    LOG.info(
        "{}[{}] -> {}[{}]: read {} records, sent {} (the rest was there already) in {} ms "
            + "(tail scan {} ms, read and send {} ms, waiting for acks {} ms)",
        config.sourceTopic,
        range,
        config.destinationTopic,
        destination,
        read,
        acks.count(),
        (acked - started) / 1_000_000,
        (scanned - started) / 1_000_000,
        (sent - scanned) / 1_000_000,
        (acked - sent) / 1_000_000);
    if (acks.failed()) {
      Clients.discardProducer(config.producerConfig, producer);
      throw new ReplicationWriteException(
          acks.failures() + " records of partition " + range.partition + " were not written to "
              + config.destinationTopic + ": " + acks.firstError(),
          acks.firstError());
    }
    return summaries.rows(range.partition, destination, acks::at);
  }

  private void awaitAcks(AckTimes acks, SourceRange range) {
    try {
      if (!acks.awaitAll(ACK_TIMEOUT_MS)) {
        throw new ReplicationWriteException(
            "the producer did not complete the records of " + config.sourceTopic + " " + range
                + " in " + ACK_TIMEOUT_MS + " ms");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // a killed task: Spark replays the batch
      throw new ReplicationWriteException("interrupted waiting for acks of " + range, e);
    }
  }

  /** The encoded-format headers (uatu.encoded.*), the same on every record. */
  private Header[] fixedHeaders() {
    List<Header> fixed = new ArrayList<>();
    for (String[] extra : config.extraHeaders()) {
      fixed.add(new RecordHeader(extra[0], extra[1].getBytes(StandardCharsets.UTF_8)));
    }
    return fixed.toArray(new Header[0]);
  }

  /** The source headers as they came (null values kept), the fixed ones, provenance last. */
  private static Headers stamped(Headers headers, Header[] fixed, Header provenance) {
    for (Header header : fixed) {
      headers.add(header);
    }
    return headers.add(provenance);
  }
}
