package dev.uatu.replication;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Queue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
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
  private static final Map<Map<String, String>, Queue<KafkaConsumer<byte[], byte[]>>> IDLE =
      new ConcurrentHashMap<>();

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
    KafkaConsumer<byte[], byte[]> consumer = idle(config).poll();
    if (consumer != null) {
      return consumer;
    }
    return new KafkaConsumer<>(
        properties(config), new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  static void giveBack(Map<String, String> config, KafkaConsumer<byte[], byte[]> consumer) {
    consumer.unsubscribe();
    idle(config).add(consumer);
  }

  /**
   * A consumer assigned exactly the partitions of {@code starts}, each positioned at its start
   * offset. Prefers an idle one that a task of the continuous copy gave back at exactly those
   * positions ({@link #giveBackAssigned}): it still holds what it fetched ahead, so the next
   * epoch reads on without a new fetch round trip. Any other is assigned and positioned anew.
   */
  static KafkaConsumer<byte[], byte[]> borrowAt(
      Map<String, String> config, Map<TopicPartition, Long> starts) {
    Queue<KafkaConsumer<byte[], byte[]>> idle = idle(config);
    for (KafkaConsumer<byte[], byte[]> consumer : idle) {
      if (at(consumer, starts) && idle.remove(consumer)) {
        return consumer;
      }
    }
    KafkaConsumer<byte[], byte[]> consumer = borrowConsumer(config);
    consumer.assign(starts.keySet());
    starts.forEach(consumer::seek);
    return consumer;
  }

  /** Gives a consumer back keeping its assignment and positions (see {@link #borrowAt}). */
  static void giveBackAssigned(Map<String, String> config, KafkaConsumer<byte[], byte[]> consumer) {
    idle(config).add(consumer);
  }

  /** Closes a consumer that failed mid-use instead of pooling it. */
  static void discardConsumer(KafkaConsumer<byte[], byte[]> consumer) {
    try {
      consumer.close(Duration.ZERO);
    } catch (RuntimeException e) {
      // already broken: nothing more to release
    }
  }

  private static boolean at(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> starts) {
    try {
      if (!consumer.assignment().equals(starts.keySet())) {
        return false;
      }
      for (Map.Entry<TopicPartition, Long> start : starts.entrySet()) {
        if (consumer.position(start.getKey(), Duration.ZERO) != start.getValue()) {
          return false;
        }
      }
      return true;
    } catch (RuntimeException e) { // no valid position without asking the broker: not this one
      return false;
    }
  }

  /** Close every cached client (a driver that ran the sink in-process, like a test session). */
  public static void closeAll() {
    PRODUCERS.values().forEach(KafkaProducer::close);
    PRODUCERS.clear();
    IDLE.values().forEach(q -> q.forEach(KafkaConsumer::close));
    IDLE.clear();
  }

  private static Queue<KafkaConsumer<byte[], byte[]>> idle(Map<String, String> config) {
    return IDLE.computeIfAbsent(new HashMap<>(config), c -> new ConcurrentLinkedQueue<>());
  }

  private static Properties properties(Map<String, String> config) {
    Properties props = new Properties();
    props.putAll(config);
    return props;
  }
}
