package dev.uatu.replication;

import dev.uatu.faults.FaultPoints;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task of one epoch of the continuous copy ({@link ContinuousCopy}): a long-running copy of
 * one or more source partitions, like one of MirrorMaker 2's tasks, that runs until the epoch's
 * deadline and then reports what it copied.
 *
 * <ol>
 *   <li>In the run's first epoch, and in any retried attempt, reads the tail of each
 *       destination partition ({@link DestinationTail}) for the highest source offset already
 *       stamped there: what a crashed run wrote is not written again. Later epochs skip up to
 *       what the epochs before knew the destination holds ({@link EpochTask#heldUpTo}): what
 *       they read and had acknowledged, and what the tail held even where they did not read
 *       that far yet (a first epoch can end before it reads a partition).
 *   <li>Polls the source and sends every record as soon as it arrives ({@link PartitionCopy}:
 *       key, value, headers, source timestamp, provenance stamp), at the pace the JobGroup's
 *       flow control allows, until the deadline or a stop request.
 *   <li>Waits for every ack (a failed delivery fails the task: the epoch is retried or the run
 *       fails, nothing is lost), and returns per partition the offsets it read and its summary
 *       rows. The consumer is kept assigned where it stopped, so the next epoch's task picks it
 *       up with what it fetched ahead.
 * </ol>
 */
final class StreamCopier implements FlatMapFunction<Iterator<EpochTask>, EpochResult> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(StreamCopier.class);
  private static final long POLL_MS = 100;
  // Runs asked to stop: their tasks end at their next poll instead of at the epoch's deadline
  // (in the JVM that asked, which in local mode runs every task).
  private static final Set<String> STOPPING = ConcurrentHashMap.newKeySet();

  private final CopyConfig config;

  StreamCopier(CopyConfig config) {
    this.config = config;
  }

  static void requestStop(String runId) {
    STOPPING.add(runId);
  }

  static void forget(String runId) {
    STOPPING.remove(runId);
  }

  @Override
  public Iterator<EpochResult> call(Iterator<EpochTask> tasks) {
    List<EpochResult> results = new ArrayList<>();
    while (tasks.hasNext()) {
      results.addAll(copy(tasks.next()));
    }
    return results.iterator();
  }

  private List<EpochResult> copy(EpochTask task) {
    TaskContext context = TaskContext.get();
    boolean retried = context != null && context.attemptNumber() > 0;
    Map<TopicPartition, Long> starts = new LinkedHashMap<>();
    Map<Integer, PartitionCopy> copies = new LinkedHashMap<>();
    for (int i = 0; i < task.partitions.length; i++) {
      int partition = task.partitions[i];
      long from = task.fromOffsets[i];
      long held = Math.max(task.heldUpTo[i], from - 1);
      long doneUpTo = task.scanTail || retried ? Math.max(held, tailOf(partition)) : held;
      copies.put(partition, new PartitionCopy(config, partition, doneUpTo));
      starts.put(new TopicPartition(config.sourceTopic, partition), from);
    }
    if (task.scanTail || retried) {
      // The fault hook's point "replication.tail_read" (core/faults.py): a pause here longer
      // than the epoch ends the epoch before this task reads a record.
      FaultPoints.hit("replication.tail_read");
    }
    KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
    AckTimes acks = new AckTimes();
    KafkaConsumer<byte[], byte[]> source = Clients.borrowAt(config.sourceConsumerConfig, starts);
    FlowLimiter limiter = config.joinFlow(task.tasks);
    Map<TopicPartition, Long> next = new LinkedHashMap<>();
    boolean healthy = false;
    long pollStartedMs = System.currentTimeMillis();
    long pollEndedMs = pollStartedMs;
    try {
      while (!acks.failed()) {
        long left = task.deadlineMs - System.currentTimeMillis();
        if (left <= 0 || STOPPING.contains(task.runId) || killed(context)) {
          break;
        }
        ConsumerRecords<byte[], byte[]> records =
            source.poll(Duration.ofMillis(Math.min(POLL_MS, left)));
        long readMs = System.currentTimeMillis();
        for (TopicPartition tp : records.partitions()) {
          PartitionCopy partition = copies.get(tp.partition());
          for (ConsumerRecord<byte[], byte[]> record : records.records(tp)) {
            partition.copy(record, readMs, producer, acks, limiter);
          }
        }
      }
      pollEndedMs = System.currentTimeMillis();
      for (TopicPartition tp : starts.keySet()) {
        next.put(tp, source.position(tp));
      }
      healthy = true;
    } finally {
      config.leaveFlow(limiter, task.tasks);
      if (healthy) {
        Clients.giveBackAssigned(config.sourceConsumerConfig, source, next);
      } else {
        Clients.discardConsumer(source);
      }
    }
    producer.flush(); // the epoch's last records need not wait out linger.ms
    RangeCopier.awaitAcks(acks, config.sourceTopic + " " + starts.keySet());
    RangeCopier.failOnDeliveryErrors(config, producer, acks, "epoch " + task.epoch);
    List<EpochResult> results = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> start : starts.entrySet()) {
      PartitionCopy partition = copies.get(start.getKey().partition());
      results.add(
          new EpochResult(
              partition.partition,
              start.getValue(),
              next.get(start.getKey()),
              partition.doneUpTo,
              partition.read(),
              partition.sent(),
              partition.rows(acks),
              pollStartedMs,
              pollEndedMs));
    }
    if (LOG.isDebugEnabled()) {
      LOG.debug("epoch {} of {}: {}", task.epoch, config.sourceTopic, describe(results));
    }
    return results;
  }

  private long tailOf(int partition) {
    KafkaConsumer<byte[], byte[]> tail = Clients.borrowConsumer(config.consumerConfig);
    try {
      return DestinationTail.replicatedUpTo(tail, config, partition);
    } finally {
      Clients.giveBack(config.consumerConfig, tail);
    }
  }

  private static boolean killed(TaskContext context) {
    return context != null && context.isInterrupted();
  }

  private static String describe(List<EpochResult> results) {
    StringBuilder text = new StringBuilder();
    for (EpochResult r : results) {
      text.append(r.partition()).append(":[").append(r.fromOffset()).append(", ")
          .append(r.nextOffset()).append(") sent ").append(r.sent()).append("; ");
    }
    return text.toString();
  }
}
