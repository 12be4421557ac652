package dev.uatu.replication;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What one copy task does with each record of one source partition, in both copies: the range
 * copy of a micro-batch ({@link RangeCopier}) and the continuous copy ({@link StreamCopier}).
 *
 * <p>A record at or below {@code doneUpTo} (the highest source offset the destination already
 * holds, from {@link DestinationTail}) is counted and not sent; any other is sent to the
 * destination partition with its key, value, headers and source timestamp, the encoded-format
 * headers and the {@link Provenance} stamp, after the JobGroup's flow control lets it go.
 */
final class PartitionCopy {
  final int partition;
  final int destination;
  final long doneUpTo;
  final WindowSummaries summaries;
  private final String sourceTopic;
  private final String destinationTopic;
  private final Provenance provenance;
  private final Header[] fixed;
  private long read;
  private long sent;

  PartitionCopy(CopyConfig config, int partition, long doneUpTo) {
    this.partition = partition;
    this.destination = config.destinationPartition(partition);
    this.doneUpTo = doneUpTo;
    this.summaries = new WindowSummaries(config.auditIntervalMs);
    this.sourceTopic = config.sourceTopic;
    this.destinationTopic = config.destinationTopic;
    this.provenance = new Provenance(config.sourceCluster, config.sourceTopic, partition);
    this.fixed = fixedHeaders(config);
  }

  /**
   * Copies {@code record}, read from the source at {@code readMs}, unless the destination holds
   * it already; returns whether it was sent. {@code limiter} may be null (no flow control).
   */
  boolean copy(
      ConsumerRecord<byte[], byte[]> record,
      long readMs,
      KafkaProducer<byte[], byte[]> producer,
      AckTimes acks,
      FlowLimiter limiter) {
    long offset = record.offset();
    read++;
    long timestampMs =
        record.timestampType() == TimestampType.NO_TIMESTAMP_TYPE ? -1 : record.timestamp();
    int keyBytes = record.key() == null ? 0 : record.key().length;
    int valueBytes = record.value() == null ? 0 : record.value().length;
    if (offset <= doneUpTo) {
      summaries.add(offset, timestampMs, readMs, keyBytes, valueBytes, -1);
      return false;
    }
    if (limiter != null) {
      limiter.acquire((long) keyBytes + valueBytes);
    }
    int ackIndex = acks.count();
    producer.send(
        new ProducerRecord<>(
            destinationTopic,
            destination,
            timestampMs < 0 ? null : timestampMs, // none: the destination stamps it
            record.key(),
            record.value(),
            stamped(record.headers(), provenance.stamp(offset))),
        acks.next());
    summaries.add(offset, timestampMs, readMs, keyBytes, valueBytes, ackIndex);
    sent++;
    return true;
  }

  long read() {
    return read;
  }

  long sent() {
    return sent;
  }

  /**
   * The summary rows of what this task copied of the partition, ack times from {@code acks}:
   * {@link WindowSummaries}' columns, then the source and the destination topic.
   */
  List<Row> rows(AckTimes acks) {
    List<Row> rows = new ArrayList<>();
    for (Row row : summaries.rows(partition, destination, acks::at)) {
      Object[] values = new Object[row.length() + 2];
      for (int i = 0; i < row.length(); i++) {
        values[i] = row.get(i);
      }
      values[row.length()] = sourceTopic;
      values[row.length() + 1] = destinationTopic;
      rows.add(RowFactory.create(values));
    }
    return rows;
  }

  /** The source headers as they came (null values kept), the fixed ones, provenance last. */
  private Headers stamped(Headers headers, Header provenance) {
    for (Header header : fixed) {
      headers.add(header);
    }
    return headers.add(provenance);
  }

  /** The encoded-format headers (uatu.encoded.*), the same on every record. */
  private static Header[] fixedHeaders(CopyConfig config) {
    List<Header> fixed = new ArrayList<>();
    for (String[] extra : config.extraHeaders()) {
      fixed.add(new RecordHeader(extra[0], extra[1].getBytes(StandardCharsets.UTF_8)));
    }
    return fixed.toArray(new Header[0]);
  }
}
