package dev.uatu.dispatch;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;

/** {@link DueRangeSource}'s stream: plans each micro-batch on the driver with one consumer that
 * only reads metadata (partitions, end offsets, offsets for a time). */
final class DueRangeStream
    implements MicroBatchStream, SupportsAdmissionControl, ReportsSourceMetrics {
  private static final Duration TIMEOUT = Duration.ofSeconds(30);
  private final String topic;
  private final long delayMs;
  private final String startingOffsets;
  private final TopicOffsets ending; // null: unbounded
  private final long maxRecordsPerBatch;
  private final Map<String, Object> consumerConfig = new HashMap<>();
  private KafkaConsumer<byte[], byte[]> consumer;
  private volatile long recordsBehind;
  private volatile long recordsNotDue;

  DueRangeStream(Map<String, String> options) {
    this.topic = required(options, "topic");
    this.delayMs = Long.parseLong(options.getOrDefault("delayMs", "0"));
    this.startingOffsets = options.getOrDefault("startingOffsets", "earliest");
    String end = options.get("endingOffsets");
    this.ending = end == null || end.isEmpty() ? null : TopicOffsets.parse(end, topic);
    this.maxRecordsPerBatch = Long.parseLong(options.getOrDefault("maxRecordsPerBatch", "0"));
    options.forEach(
        (k, v) -> {
          if (k.startsWith("kafka.")) {
            consumerConfig.put(k.substring("kafka.".length()), v);
          }
        });
    consumerConfig.put("enable.auto.commit", "false");
  }

  private static String required(Map<String, String> options, String name) {
    String value = options.get(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("the due-range source needs option " + name);
    }
    return value;
  }

  private KafkaConsumer<byte[], byte[]> consumer() {
    if (consumer == null) {
      Properties props = new Properties();
      props.putAll(consumerConfig);
      consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }
    return consumer;
  }

  private List<TopicPartition> partitions() {
    List<TopicPartition> tps = new ArrayList<>();
    if (ending != null) {
      ending.offsets.keySet().forEach(p -> tps.add(new TopicPartition(topic, p)));
      return tps;
    }
    List<PartitionInfo> infos = consumer().partitionsFor(topic, TIMEOUT);
    if (infos == null || infos.isEmpty()) {
      throw new IllegalStateException("topic " + topic + " has no partitions (does it exist?)");
    }
    infos.forEach(info -> tps.add(new TopicPartition(topic, info.partition())));
    return tps;
  }

  @Override
  public Offset initialOffset() {
    List<TopicPartition> tps = partitions();
    Map<TopicPartition, Long> earliest = consumer().beginningOffsets(tps, TIMEOUT);
    Map<TopicPartition, Long> latest = consumer().endOffsets(tps, TIMEOUT);
    TopicOffsets given =
        startingOffsets.startsWith("{") ? TopicOffsets.parse(startingOffsets, topic) : null;
    Map<Integer, Long> start = new TreeMap<>();
    for (TopicPartition tp : tps) {
      long offset;
      if (given != null && given.offsets.containsKey(tp.partition())) {
        long v = given.offsets.get(tp.partition());
        offset = v == -2 ? earliest.get(tp) : v == -1 ? latest.get(tp) : v;
      } else if ("latest".equals(startingOffsets)) {
        offset = latest.get(tp);
      } else {
        offset = earliest.get(tp);
      }
      if (ending != null) {
        offset = Math.min(offset, ending.offsets.get(tp.partition()));
      }
      start.put(tp.partition(), offset);
    }
    return new TopicOffsets(topic, start);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return maxRecordsPerBatch > 0 ? ReadLimit.maxRows(maxRecordsPerBatch) : ReadLimit.allAvailable();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is the one to call");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    TopicOffsets start = (TopicOffsets) startOffset;
    List<TopicPartition> tps = partitions();
    Map<TopicPartition, Long> high = consumer().endOffsets(tps, TIMEOUT);
    Map<TopicPartition, Long> earliest = null;
    Map<TopicPartition, OffsetAndTimestamp> due = null;
    if (delayMs > 0) {
      long dueBefore = Math.max(0, System.currentTimeMillis() - delayMs);
      Map<TopicPartition, Long> query = new HashMap<>();
      tps.forEach(tp -> query.put(tp, dueBefore));
      due = consumer().offsetsForTimes(query, TIMEOUT);
    }
    Map<Integer, Long> from = new TreeMap<>();
    Map<Integer, Long> until = new TreeMap<>();
    long behind = 0;
    long notDue = 0;
    for (TopicPartition tp : tps) {
      int p = tp.partition();
      Long s = start == null ? null : start.offsets.get(p);
      if (s == null) { // a partition added since the last batch starts at its beginning
        if (earliest == null) {
          earliest = consumer().beginningOffsets(tps, TIMEOUT);
        }
        s = earliest.get(tp);
      }
      long available = high.get(tp);
      if (ending != null) {
        available = Math.min(available, ending.offsets.get(p));
      }
      long end = available;
      if (due != null && due.get(tp) != null) {
        end = Math.min(end, due.get(tp).offset());
      }
      end = Math.max(end, s);
      from.put(p, s);
      until.put(p, end);
      behind += Math.max(0, available - s);
      notDue += Math.max(0, available - end);
    }
    if (limit instanceof ReadMaxRows max) {
      cap(from, until, max.maxRows());
    }
    recordsBehind = behind;
    recordsNotDue = notDue;
    return new TopicOffsets(topic, until);
  }

  /** Shrinks the ranges to {@code max} records in all, in proportion to their sizes. */
  private static void cap(Map<Integer, Long> from, Map<Integer, Long> until, long max) {
    long total = 0;
    for (int p : until.keySet()) {
      total += until.get(p) - from.get(p);
    }
    if (total <= max) {
      return;
    }
    for (int p : until.keySet()) {
      long size = until.get(p) - from.get(p);
      long share = (long) Math.floor((double) size * max / total);
      until.put(p, from.get(p) + Math.max(share, Math.min(size, 1)));
    }
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    TopicOffsets s = (TopicOffsets) start;
    TopicOffsets e = (TopicOffsets) end;
    List<InputPartition> ranges = new ArrayList<>();
    Map<TopicPartition, Long> earliest = null;
    for (Map.Entry<Integer, Long> entry : e.offsets.entrySet()) {
      int p = entry.getKey();
      Long from = s == null ? null : s.offsets.get(p);
      if (from == null) {
        if (earliest == null) {
          earliest = consumer().beginningOffsets(
              List.of(new TopicPartition(topic, p)), TIMEOUT);
        }
        from = earliest.get(new TopicPartition(topic, p));
      }
      if (entry.getValue() > from) {
        ranges.add(new DueRangeSource.RangePartition(topic, p, from, entry.getValue()));
      }
    }
    return ranges.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new DueRangeSource.RangeReaderFactory();
  }

  @Override
  public Offset deserializeOffset(String json) {
    return TopicOffsets.parse(json, topic);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {
    if (consumer != null) {
      consumer.close(Duration.ofSeconds(5));
      consumer = null;
    }
  }

  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return Map.of(
        "recordsBehind", Long.toString(recordsBehind),
        "recordsNotDue", Long.toString(recordsNotDue),
        "delayMs", Long.toString(delayMs));
  }
}
