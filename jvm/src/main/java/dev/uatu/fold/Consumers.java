package dev.uatu.fold;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Byte-array consumers that live as long as the executor JVM, pooled per configuration: a
 * fold task per partition and micro-batch would otherwise pay a consumer's connection and
 * metadata set-up every time. Consumers are not thread-safe, so a task borrows one and gives
 * it back.
 *
 * <p>A consumer is given back still assigned to the partitions it read, with the records it
 * fetched past the ranges' ends ({@link PooledConsumer}). The next batch's ranges of those
 * partitions start there, so the task that reads them borrows that consumer ({@link #borrow}
 * prefers it) and reads on without a seek, from the records already fetched: a seek to a
 * partition's new position cost a fetch round trip before the first record (50-100 ms a task
 * in the load generator's bench). So that each task's partitions keep a consumer, a new one is
 * made while the JVM has fewer than {@link #MAX_PER_CONFIG}.
 *
 * <p>Pooled consumers wait at most {@link #FETCH_MAX_WAIT_MS} for a fetch, whatever the
 * configuration says. A consumer given back right after reading a range to the end of its
 * partition has already sent its next fetch, which the broker holds for {@code
 * fetch.max.wait.ms} (500 ms by default) as it has nothing to return; the task that borrows the
 * consumer next cannot send its own fetch until that answer comes. A fold reads ranges Spark
 * planned from offsets the broker reported, so it never needs the broker to wait for records.
 */
public final class Consumers {
  /** The pooled consumers' {@code fetch.max.wait.ms}. */
  public static final String FETCH_MAX_WAIT_MS = "10";

  /**
   * Consumers one JVM keeps per configuration. Each idle one holds at most one fetch of the
   * partitions it read ({@code fetch.max.bytes}), so the pool stays within that many times it.
   */
  public static final int MAX_PER_CONFIG = 16;

  // configuration -> idle consumers, most recently given back last; guarded by IDLE, as is
  // MADE: configuration -> consumers made (idle or borrowed).
  private static final Map<Map<String, String>, List<PooledConsumer>> IDLE =
      new HashMap<>();
  private static final Map<Map<String, String>, Integer> MADE = new HashMap<>();

  private Consumers() {}

  /**
   * A consumer of {@code config} for reading {@code starts}' partitions, each from its offset:
   * the idle one that is already at the most of them, if any is at one; else a new one while
   * this JVM has fewer than {@link #MAX_PER_CONFIG} of the configuration, so each task's
   * partitions keep a consumer of their own; else the idle one given back longest ago. The
   * caller moves it to {@code starts} ({@link PooledConsumer#moveTo}).
   */
  public static PooledConsumer borrow(
      Map<String, String> config, Map<TopicPartition, Long> starts) {
    synchronized (IDLE) {
      List<PooledConsumer> idle = idle(config);
      int best = -1;
      int bestReady = 0;
      for (int i = idle.size() - 1; i >= 0; i--) {
        int ready = idle.get(i).readyFor(starts);
        if (ready > bestReady) {
          best = i;
          bestReady = ready;
        }
      }
      if (best >= 0) {
        return idle.remove(best);
      }
      int made = MADE.getOrDefault(config, 0);
      if (made >= MAX_PER_CONFIG && !idle.isEmpty()) {
        return idle.remove(0);
      }
      MADE.put(new HashMap<>(config), made + 1);
    }
    Properties props = new Properties();
    props.putAll(config);
    props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, FETCH_MAX_WAIT_MS);
    try {
      return new PooledConsumer(
          new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
    } catch (RuntimeException e) {
      synchronized (IDLE) {
        MADE.merge(config, -1, Integer::sum); // a bad configuration must not fill the pool
      }
      throw e;
    }
  }

  /** Gives back a consumer that read its ranges to the end: it stays assigned where it is. */
  public static void giveBack(Map<String, String> config, PooledConsumer consumer) {
    synchronized (IDLE) {
      idle(config).add(consumer);
    }
  }

  /** Gives back a consumer whose read failed: unassigned first, so its state is dropped. */
  public static void giveBackFailed(Map<String, String> config, PooledConsumer consumer) {
    consumer.reset();
    giveBack(config, consumer);
  }

  private static List<PooledConsumer> idle(Map<String, String> config) {
    List<PooledConsumer> idle = IDLE.get(config);
    if (idle == null) {
      idle = new ArrayList<>();
      IDLE.put(new HashMap<>(config), idle); // a copy: the caller's map may change later
    }
    return idle;
  }

  /** Close every pooled consumer (a driver that ran folds in-process, like a test session). */
  public static void closeAll() {
    synchronized (IDLE) {
      IDLE.values().forEach(idle -> idle.forEach(pooled -> pooled.consumer.close()));
      IDLE.clear();
      MADE.clear();
    }
  }
}
