package dev.uatu.replication;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka clients that live as long as the executor JVM. Spark runs many short tasks (one per
 * partition and micro-batch); a producer per task would pay its connection and metadata set-up
 * every time. The producer is thread-safe and shared by the tasks of one configuration;
 * consumers are not, so idle ones wait in a pool.
 */
public final class Clients {
  private static final Map<Map<String, String>, KafkaProducer<byte[], byte[]>> PRODUCERS =
      new ConcurrentHashMap<>();
  // configuration -> idle consumers, each with where it was given back; guarded by IDLE
  private static final Map<Map<String, String>, List<Idle>> IDLE = new HashMap<>();

  /** An idle consumer and its positions when given back (empty: unassigned). */
  private record Idle(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> positions) {}

  private Clients() {}

  static KafkaProducer<byte[], byte[]> producer(Map<String, String> config) {
    return PRODUCERS.computeIfAbsent(
        new HashMap<>(config),
        c -> new KafkaProducer<>(properties(c), new ByteArraySerializer(), new ByteArraySerializer()));
  }

  /**
   * Drops a producer after a failed delivery: an idempotent producer can stay in an error
   * state, and the task's retry (or the next batch) should start from a fresh one. Tasks still
   * using it fail too, and their batch is replayed.
   */
  static void discardProducer(Map<String, String> config, KafkaProducer<byte[], byte[]> producer) {
    if (PRODUCERS.remove(config, producer)) {
      producer.close(Duration.ZERO);
    }
  }

  static KafkaConsumer<byte[], byte[]> borrowConsumer(Map<String, String> config) {
    synchronized (IDLE) {
      List<Idle> idle = idle(config);
      if (!idle.isEmpty()) {
        return idle.remove(0).consumer;
      }
    }
    return new KafkaConsumer<>(
        properties(config), new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  static void giveBack(Map<String, String> config, KafkaConsumer<byte[], byte[]> consumer) {
    consumer.unsubscribe();
    synchronized (IDLE) {
      idle(config).add(new Idle(consumer, Map.of()));
    }
  }

  /**
   * A consumer assigned exactly the partitions of {@code starts}, each positioned at its start
   * offset. Prefers an idle one that a task of the continuous copy gave back at exactly those
   * positions ({@link #giveBackAssigned}): it still holds what it fetched ahead, so the next
   * epoch reads on without a new fetch round trip. Any other is assigned and positioned anew.
   *
   * <p>The pool matches on the positions recorded at give-back and never calls an idle
   * consumer: a consumer throws if two threads call it at once, and asking idle consumers
   * where they were failed an epoch's task when three tasks started together.
   */
  static KafkaConsumer<byte[], byte[]> borrowAt(
      Map<String, String> config, Map<TopicPartition, Long> starts) {
    synchronized (IDLE) {
      List<Idle> idle = idle(config);
      for (int i = 0; i < idle.size(); i++) {
        if (idle.get(i).positions.equals(starts)) {
          return idle.remove(i).consumer;
        }
      }
    }
    KafkaConsumer<byte[], byte[]> consumer = borrowConsumer(config);
    consumer.assign(starts.keySet());
    starts.forEach(consumer::seek);
    return consumer;
  }

  /**
   * Gives a consumer back keeping its assignment, at {@code positions} (each assigned
   * partition's next offset, as the consumer reports it; see {@link #borrowAt}).
   */
  static void giveBackAssigned(
      Map<String, String> config,
      KafkaConsumer<byte[], byte[]> consumer,
      Map<TopicPartition, Long> positions) {
    synchronized (IDLE) {
      idle(config).add(new Idle(consumer, Map.copyOf(positions)));
    }
  }

  /** Closes a consumer that failed mid-use instead of pooling it. */
  static void discardConsumer(KafkaConsumer<byte[], byte[]> consumer) {
    try {
      consumer.close(Duration.ZERO);
    } catch (RuntimeException e) {
      // already broken: nothing more to release
    }
  }

  /** Close every cached client (a driver that ran the sink in-process, like a test session). */
  public static void closeAll() {
    PRODUCERS.values().forEach(KafkaProducer::close);
    PRODUCERS.clear();
    synchronized (IDLE) {
      IDLE.values().forEach(idle -> idle.forEach(pooled -> pooled.consumer.close()));
      IDLE.clear();
    }
  }

  private static List<Idle> idle(Map<String, String> config) { // holding IDLE
    return IDLE.computeIfAbsent(new HashMap<>(config), c -> new ArrayList<>());
  }

  private static Properties properties(Map<String, String> config) {
    Properties props = new Properties();
    props.putAll(config);
    return props;
  }
}
