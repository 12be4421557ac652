package dev.uatu.dispatch;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Queue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;

/** The Spark task function: dispatches each {@link Range} it is given (one per task) with a
 * {@link PartitionRun}, and returns the summary rows. Consumers are pooled per JVM. */
final class RangeDispatcher implements FlatMapFunction<Iterator<Range>, Row> {
  private static final long serialVersionUID = 1L;
  private static final Map<Map<String, String>, Queue<KafkaConsumer<byte[], byte[]>>> IDLE =
      new ConcurrentHashMap<>();

  private final DispatchConfig config;

  RangeDispatcher(DispatchConfig config) {
    this.config = config;
  }

  @Override
  public Iterator<Row> call(Iterator<Range> ranges) throws InterruptedException {
    GroupRuntime runtime = GroupRuntime.of(config);
    runtime.connect(5_000); // at once when the driver (or an earlier task) connected it
    List<Row> rows = new ArrayList<>();
    while (ranges.hasNext()) {
      Range range = ranges.next();
      KafkaConsumer<byte[], byte[]> consumer = borrow(config.consumerConfig);
      try {
        rows.addAll(new PartitionRun(runtime, range).run(consumer));
      } finally {
        consumer.unsubscribe();
        idle(config.consumerConfig).add(consumer);
      }
    }
    return rows.iterator();
  }

  static KafkaConsumer<byte[], byte[]> borrow(Map<String, String> config) {
    KafkaConsumer<byte[], byte[]> consumer = idle(config).poll();
    if (consumer != null) {
      return consumer;
    }
    Properties props = new Properties();
    props.putAll(config);
    return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private static Queue<KafkaConsumer<byte[], byte[]>> idle(Map<String, String> config) {
    return IDLE.computeIfAbsent(config, c -> new ConcurrentLinkedQueue<>());
  }

  /**
   * Closes the pooled consumers no task holds now. Each is taken off its queue before it is
   * closed, so a task that borrows at the same time gets an open one or a new one, never one
   * being closed.
   */
  static void closeIdleConsumers() {
    for (Queue<KafkaConsumer<byte[], byte[]>> idle : IDLE.values()) {
      KafkaConsumer<byte[], byte[]> consumer;
      while ((consumer = idle.poll()) != null) {
        consumer.close();
      }
    }
  }
}
