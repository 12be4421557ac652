package dev.uatu.replication;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The copy of one source partition's records in one micro-batch (one Spark task).
 *
 * <ol>
 *   <li>Reads the tail of the destination partition ({@link DestinationTail}) and skips every
 *       source offset already stamped there.
 *   <li>Sends every newer record to the destination partition, keeping key, value, headers
 *       and the source timestamp, and appending the provenance stamps (cluster, topic,
 *       partition, encoded format, offset).
 *   <li>Flushes; any failed delivery fails the task, so the batch is replayed rather than a
 *       record lost. Returns one summary row per window of source timestamps.
 * </ol>
 *
 * <p>Input rows have the columns of Python's {@code writer.INPUT_COLUMNS}, in that order.
 */
final class PartitionCopier implements MapPartitionsFunction<Row, Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(PartitionCopier.class);

  // Positions of writer.INPUT_COLUMNS: key, value, partition, offset, timestamp_ms, headers.
  private static final int KEY = 0;
  private static final int VALUE = 1;
  private static final int PARTITION = 2;
  private static final int OFFSET = 3;
  private static final int TIMESTAMP_MS = 4;
  private static final int HEADERS = 5;

  private final CopyConfig config;

  PartitionCopier(CopyConfig config) {
    this.config = config;
  }

  @Override
  public Iterator<Row> call(Iterator<Row> rows) {
    if (!rows.hasNext()) {
      return Collections.emptyIterator(); // no partition to look up, no broker to ask
    }
    long started = System.nanoTime();
    Row row = rows.next();
    int sourcePartition = row.getInt(PARTITION);
    int destination = config.destinationPartition(sourcePartition);
    long doneUpTo;
    KafkaConsumer<byte[], byte[]> consumer = Clients.borrowConsumer(config.consumerConfig);
    try {
      doneUpTo = DestinationTail.replicatedUpTo(consumer, config, sourcePartition);
    } finally {
      Clients.giveBack(config.consumerConfig, consumer);
    }
    long scanned = System.nanoTime();
    List<Header> fixed = fixedStamps(sourcePartition);
    KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
    AckTimes acks = new AckTimes();
    WindowSummaries summaries = new WindowSummaries(config.auditIntervalMs);
    long read = 0;
    while (true) {
      read++;
      if (row.getInt(PARTITION) != sourcePartition) {
        throw new ReplicationWriteException(
            "one task got source partitions " + sourcePartition + " and " + row.getInt(PARTITION)
                + "; per-partition order needs one task per partition (do not set minPartitions)");
      }
      long offset = row.getLong(OFFSET);
      long timestampMs = row.getLong(TIMESTAMP_MS);
      byte[] key = row.isNullAt(KEY) ? null : (byte[]) row.get(KEY);
      byte[] value = row.isNullAt(VALUE) ? null : (byte[]) row.get(VALUE);
      int keyLength = key == null ? 0 : key.length;
      int valueLength = value == null ? 0 : value.length;
      long readMs = System.currentTimeMillis();
      if (offset > doneUpTo) {
        int ackIndex = acks.count();
        producer.send(
            new ProducerRecord<>(
                config.destinationTopic,
                destination,
                timestampMs < 0 ? null : timestampMs, // a record without one gets the send time
                key,
                value,
                headers(row, fixed, offset)),
            acks.next());
        summaries.add(offset, timestampMs, readMs, keyLength, valueLength, ackIndex);
      } else {
        summaries.add(offset, timestampMs, readMs, keyLength, valueLength, -1);
      }
      if (acks.failed() || !rows.hasNext()) {
        break; // after a failure, stop sending: the batch is replayed from its start
      }
      row = rows.next();
    }
    long sent = System.nanoTime();
    producer.flush();
    long flushed = System.nanoTime();
    LOG.info(
        "partition {} -> {}[{}]: read {} records, sent {} (the rest was there already) in {} ms "
            + "(tail scan {} ms, read and send {} ms, flush {} ms)",
        sourcePartition,
        config.destinationTopic,
        destination,
        read,
        acks.count(),
        (flushed - started) / 1_000_000,
        (scanned - started) / 1_000_000,
        (sent - scanned) / 1_000_000,
        (flushed - sent) / 1_000_000);
    if (acks.failed()) {
      Clients.discardProducer(config.producerConfig, producer);
      throw new ReplicationWriteException(
          acks.failures() + " records of partition " + sourcePartition + " were not written to "
              + config.destinationTopic + ": " + acks.firstError(),
          acks.firstError());
    }
    return summaries.rows(sourcePartition, destination, acks::at).iterator();
  }

  private List<Header> fixedStamps(int sourcePartition) {
    List<Header> fixed = new ArrayList<>();
    fixed.add(stamp(DestinationTail.STAMP_CLUSTER, config.sourceCluster));
    fixed.add(stamp(DestinationTail.STAMP_TOPIC, config.sourceTopic));
    fixed.add(stamp(DestinationTail.STAMP_PARTITION, Integer.toString(sourcePartition)));
    for (String[] extra : config.extraHeaders()) {
      fixed.add(stamp(extra[0], extra[1]));
    }
    return fixed;
  }

  /** Source headers (null values kept), then the fixed stamps, then the offset stamp. */
  private static List<Header> headers(Row row, List<Header> fixed, long offset) {
    List<Header> headers = new ArrayList<>(fixed.size() + 4);
    if (!row.isNullAt(HEADERS)) {
      for (Row header : row.<Row>getList(HEADERS)) {
        headers.add(new RecordHeader(header.getString(0), (byte[]) header.get(1)));
      }
    }
    headers.addAll(fixed);
    headers.add(stamp(DestinationTail.STAMP_OFFSET, Long.toString(offset)));
    return headers;
  }

  private static Header stamp(String name, String value) {
    return new RecordHeader(name, value.getBytes(StandardCharsets.UTF_8));
  }
}
