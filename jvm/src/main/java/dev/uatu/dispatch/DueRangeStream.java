package dev.uatu.dispatch;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;

/** {@link DueRangeSource}'s stream: plans each micro-batch on the driver with one admin client
 * that only reads metadata (partitions, end offsets, offsets for a time), as Spark's own Kafka
 * source does. Admin answers from fresh metadata each time: a consumer keeps a deleted topic in
 * its cached metadata and retries its offset lookups until their timeout, so a dispatcher whose
 * topic was deleted took the whole timeout to fail; the admin's describe fails at once. */
final class DueRangeStream
    implements MicroBatchStream, SupportsAdmissionControl, ReportsSourceMetrics {
  private static final Duration TIMEOUT = Duration.ofSeconds(30);
  private final String topic;
  private final long delayMs;
  private final String startingOffsets;
  private final TopicOffsets ending; // null: unbounded
  private final long maxRecordsPerBatch;
  private final Map<String, Object> adminConfig = new HashMap<>();
  private final ListOffsetsOptions listOptions;
  private Admin admin;
  private volatile long recordsBehind;
  private volatile long recordsNotDue;

  DueRangeStream(Map<String, String> options) {
    this.topic = required(options, "topic");
    this.delayMs = Long.parseLong(options.getOrDefault("delayMs", "0"));
    this.startingOffsets = options.getOrDefault("startingOffsets", "earliest");
    String end = options.get("endingOffsets");
    this.ending = end == null || end.isEmpty() ? null : TopicOffsets.parse(end, topic);
    this.maxRecordsPerBatch = Long.parseLong(options.getOrDefault("maxRecordsPerBatch", "0"));
    // The consumer settings the source was given: the admin takes its own (connection,
    // security); the isolation level decides which end offset a lookup answers.
    IsolationLevel isolation = IsolationLevel.READ_UNCOMMITTED;
    for (Map.Entry<String, String> option : options.entrySet()) {
      if (!option.getKey().startsWith("kafka.")) {
        continue;
      }
      String key = option.getKey().substring("kafka.".length());
      if (key.equals("isolation.level")) {
        isolation = IsolationLevel.valueOf(option.getValue().toUpperCase(Locale.ROOT));
      } else if (AdminClientConfig.configNames().contains(key)) {
        adminConfig.put(key, option.getValue());
      }
    }
    this.listOptions = new ListOffsetsOptions(isolation);
  }

  private static String required(Map<String, String> options, String name) {
    String value = options.get(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("the due-range source needs option " + name);
    }
    return value;
  }

  private Admin admin() {
    if (admin == null) {
      Properties props = new Properties();
      props.putAll(adminConfig);
      admin = Admin.create(props);
    }
    return admin;
  }

  /** The value of {@code future} within the timeout; Kafka's own exception when it failed. */
  private static <T> T within(KafkaFuture<T> future, String what) {
    try {
      return future.get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof KafkaException ke) {
        throw ke;
      }
      throw new KafkaException(what + " failed", e.getCause());
    } catch (TimeoutException e) {
      throw new org.apache.kafka.common.errors.TimeoutException(
          what + " took over " + TIMEOUT.toMillis() + " ms", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new org.apache.kafka.common.errors.InterruptException(e);
    }
  }

  private List<TopicPartition> partitions() {
    List<TopicPartition> tps = new ArrayList<>();
    if (ending != null) {
      ending.offsets.keySet().forEach(p -> tps.add(new TopicPartition(topic, p)));
      return tps;
    }
    TopicDescription described;
    try {
      described =
          within(admin().describeTopics(List.of(topic)).topicNameValues().get(topic), "describe");
    } catch (UnknownTopicOrPartitionException e) {
      throw new IllegalStateException("topic " + topic + " has no partitions (does it exist?)", e);
    }
    described.partitions().forEach(p -> tps.add(new TopicPartition(topic, p.partition())));
    return tps;
  }

  /** Each partition's offset for {@code spec}: -1 where a timestamp has no record at or after
   * it (Kafka's answer to a time past the end). */
  private Map<TopicPartition, Long> offsets(List<TopicPartition> tps, OffsetSpec spec) {
    Map<TopicPartition, OffsetSpec> query = new HashMap<>();
    tps.forEach(tp -> query.put(tp, spec));
    Map<TopicPartition, ListOffsetsResultInfo> found =
        within(admin().listOffsets(query, listOptions).all(), "list offsets");
    Map<TopicPartition, Long> result = new HashMap<>();
    found.forEach((tp, info) -> result.put(tp, info.offset()));
    return result;
  }

  @Override
  public Offset initialOffset() {
    List<TopicPartition> tps = partitions();
    Map<TopicPartition, Long> earliest = offsets(tps, OffsetSpec.earliest());
    Map<TopicPartition, Long> latest = offsets(tps, OffsetSpec.latest());
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
    Map<TopicPartition, Long> high = offsets(tps, OffsetSpec.latest());
    Map<TopicPartition, Long> earliest = null;
    Map<TopicPartition, Long> due = null;
    if (delayMs > 0) {
      long dueBefore = Math.max(0, System.currentTimeMillis() - delayMs);
      due = offsets(tps, OffsetSpec.forTimestamp(dueBefore));
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
          earliest = offsets(tps, OffsetSpec.earliest());
        }
        s = earliest.get(tp);
      }
      long available = high.get(tp);
      if (ending != null) {
        available = Math.min(available, ending.offsets.get(p));
      }
      long end = available;
      if (due != null && due.get(tp) != null && due.get(tp) >= 0) {
        end = Math.min(end, due.get(tp));
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
          earliest = offsets(List.of(new TopicPartition(topic, p)), OffsetSpec.earliest());
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
    if (admin != null) {
      admin.close(Duration.ofSeconds(5));
      admin = null;
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
