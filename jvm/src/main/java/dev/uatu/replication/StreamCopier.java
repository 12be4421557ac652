package dev.uatu.replication;

import dev.uatu.faults.FaultPoints;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
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
 *
 * <p>In a relay ({@link EpochRelay}) the next epoch's task is already waiting at the deadline:
 * this task hands it the consumer, the offsets and its pending acks before step 3, and the next
 * one polls on at once. It takes the place of step 1: no tail is read, and what this task knew
 * the destination holds goes with the baton. A failed delivery of either task stops the next
 * one copying and fails its epoch too.
 */
final class StreamCopier implements FlatMapFunction<Iterator<EpochTask>, EpochResult> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(StreamCopier.class);
  private static final long POLL_MS = 100;
  // How long past the epoch before's relay wait a task waits for its baton before it fails.
  private static final long BATON_GRACE_MS = 60_000;
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
    EpochRelay.Baton baton = null;
    if (task.takesBaton) {
      baton = takeBaton(task, retried);
      if (baton == null) {
        return List.of(); // the epoch before failed, and with it the run: nothing to copy
      }
    }
    Map<TopicPartition, Long> starts = new LinkedHashMap<>();
    Map<Integer, PartitionCopy> copies = new LinkedHashMap<>();
    for (int i = 0; i < task.partitions.length; i++) {
      int partition = task.partitions[i];
      TopicPartition tp = new TopicPartition(config.sourceTopic, partition);
      long from = baton != null ? baton.positions().get(tp) : task.fromOffsets[i];
      long known = baton != null ? baton.heldUpTo().get(partition) : task.heldUpTo[i];
      long held = Math.max(known, from - 1);
      long doneUpTo = task.scanTail || retried ? Math.max(held, tailOf(partition)) : held;
      copies.put(partition, new PartitionCopy(config, partition, doneUpTo));
      starts.put(tp, from);
    }
    if (task.scanTail || retried) {
      // The fault hook's point "replication.tail_read" (core/faults.py): a pause here longer
      // than the epoch ends the epoch before this task reads a record.
      FaultPoints.hit("replication.tail_read");
    }
    KafkaProducer<byte[], byte[]> producer = Clients.producer(config.producerConfig);
    AckTimes acks = new AckTimes();
    AckTimes previousAcks = baton != null ? baton.previousAcks() : null;
    KafkaConsumer<byte[], byte[]> source =
        baton != null ? baton.consumer() : Clients.borrowAt(config.sourceConsumerConfig, starts);
    FlowLimiter limiter = config.joinFlow(task.tasks);
    Map<TopicPartition, Long> next = new LinkedHashMap<>();
    boolean healthy = false;
    long pollStartedMs = System.currentTimeMillis();
    long pollEndedMs = pollStartedMs;
    try {
      Copying copying = new Copying(task, context, copies, source, producer, acks, previousAcks,
          limiter);
      boolean more = true;
      while (more && !copying.mustStop()) {
        long now = System.currentTimeMillis();
        long until = now < task.deadlineMs ? task.deadlineMs : task.deadlineMs + task.relayWaitMs;
        ConsumerRecords<byte[], byte[]> records =
            source.poll(Duration.ofMillis(Math.max(1, Math.min(POLL_MS, until - now))));
        more = copying.copyPolled(records);
      }
      pollEndedMs = System.currentTimeMillis();
      for (TopicPartition tp : starts.keySet()) {
        next.put(tp, source.position(tp));
      }
      healthy = true;
    } finally {
      config.leaveFlow(limiter, task.tasks);
      handOn(task, healthy, source, next, copies, acks);
    }
    if (task.leavesBaton && acks.count() > 0) {
      // The fault hook's point "replication.handed_over" (core/faults.py): the next epoch's
      // task copies on while this one's acks are not yet confirmed. Only a task that sent
      // records reaches it: one that sent none has no acks to confirm, and counting it would
      // let a slow start (epochs that read nothing yet) use up the hits a drill aims with.
      FaultPoints.hit("replication.handed_over");
    }
    producer.flush(); // the epoch's last records need not wait out linger.ms
    RangeCopier.awaitAcks(acks, config.sourceTopic + " " + starts.keySet());
    RangeCopier.failOnDeliveryErrors(config, producer, acks, "epoch " + task.epoch);
    if (previousAcks != null) {
      RangeCopier.awaitAcks(previousAcks, config.sourceTopic + " " + starts.keySet());
      RangeCopier.failOnDeliveryErrors(config, producer, previousAcks, "epoch " + (task.epoch - 1));
    }
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

  /** What a task copies with, from its first poll to its hand-over or end. */
  private static final class Copying {
    private final EpochTask task;
    private final TaskContext context;
    private final Map<Integer, PartitionCopy> copies;
    private final KafkaConsumer<byte[], byte[]> source;
    private final KafkaProducer<byte[], byte[]> producer;
    private final AckTimes acks;
    private final AckTimes previousAcks; // the relay's epoch before; null outside a relay
    private final FlowLimiter limiter;

    Copying(
        EpochTask task,
        TaskContext context,
        Map<Integer, PartitionCopy> copies,
        KafkaConsumer<byte[], byte[]> source,
        KafkaProducer<byte[], byte[]> producer,
        AckTimes acks,
        AckTimes previousAcks,
        FlowLimiter limiter) {
      this.task = task;
      this.context = context;
      this.copies = copies;
      this.source = source;
      this.producer = producer;
      this.acks = acks;
      this.previousAcks = previousAcks;
      this.limiter = limiter;
    }

    /**
     * Copies what one poll returned; false if the task must stop before the end of it (see
     * {@link #mustStop}, checked before every record: a poll can hold many seconds of records
     * at the flow control's pace). The records not copied then are read again by whoever takes
     * the consumer next: each partition is rewound to its first record not copied.
     */
    boolean copyPolled(ConsumerRecords<byte[], byte[]> records) {
      long readMs = System.currentTimeMillis();
      for (TopicPartition tp : records.partitions()) {
        PartitionCopy partition = copies.get(tp.partition());
        for (ConsumerRecord<byte[], byte[]> record : records.records(tp)) {
          if (mustStop()) {
            rewind(source, records, tp, record.offset());
            return false;
          }
          partition.copy(record, readMs, producer, acks, limiter);
        }
      }
      return true;
    }

    /** Whether the task stops copying now: a stop, a kill, a failed delivery, or its hand-over. */
    boolean mustStop() {
      // A failed delivery of the task before ends this one too: nothing is sent past a record
      // that may be missing (the restart resumes below it).
      return acks.failed()
          || (previousAcks != null && previousAcks.failed())
          || STOPPING.contains(task.runId)
          || killed(context)
          || handOverNow(task, System.currentTimeMillis());
    }
  }

  /**
   * Seeks {@code source} back to the records of {@code polled} not copied: {@code stoppedAt} in
   * {@code stoppedIn}, and the first record of every partition the loop had not reached.
   */
  private static void rewind(
      KafkaConsumer<byte[], byte[]> source,
      ConsumerRecords<byte[], byte[]> polled,
      TopicPartition stoppedIn,
      long stoppedAt) {
    boolean reached = false;
    for (TopicPartition tp : polled.partitions()) {
      if (tp.equals(stoppedIn)) {
        source.seek(tp, stoppedAt);
        reached = true;
      } else if (reached) {
        source.seek(tp, polled.records(tp).get(0).offset());
      }
    }
  }

  /**
   * Past its deadline, a task that hands on to the next epoch's stops once that task is
   * waiting for it, or once it has waited {@code relayWaitMs} for it; any other stops at once.
   */
  private static boolean handOverNow(EpochTask task, long now) {
    if (now < task.deadlineMs) {
      return false;
    }
    return !task.leavesBaton
        || now >= task.deadlineMs + task.relayWaitMs
        || EpochRelay.successorWaiting(task.placeOut());
  }

  /**
   * The consumer's next home: the next epoch's task (a relay's baton), or the pool, assigned
   * where it stopped; a consumer that failed mid-use is closed. Where a delivery failed, the
   * next epoch's task gets no baton and ends with nothing copied.
   */
  private void handOn(
      EpochTask task,
      boolean healthy,
      KafkaConsumer<byte[], byte[]> source,
      Map<TopicPartition, Long> next,
      Map<Integer, PartitionCopy> copies,
      AckTimes acks) {
    if (!healthy) {
      Clients.discardConsumer(source);
      if (task.leavesBaton) {
        EpochRelay.close(task.placeOut());
      }
    } else if (task.leavesBaton && acks.failed()) {
      // This epoch fails (failOnDeliveryErrors): the next one must not copy past the record.
      Clients.giveBackAssigned(config.sourceConsumerConfig, source, next);
      EpochRelay.close(task.placeOut());
    } else if (task.leavesBaton) {
      Map<Integer, Long> held = new HashMap<>();
      copies.forEach((p, copy) -> held.put(p, copy.doneUpTo));
      EpochRelay.leave(
          task.placeOut(), new EpochRelay.Baton(source, next, held, acks));
    } else {
      Clients.giveBackAssigned(config.sourceConsumerConfig, source, next);
    }
  }

  /**
   * The baton of the epoch before's task in this JVM; null if that task failed. A retried
   * attempt cannot have one (the first attempt took it), nor can a task in another JVM.
   */
  private static EpochRelay.Baton takeBaton(EpochTask task, boolean retried) {
    if (retried) {
      throw new ReplicationWriteException(
          "epoch " + task.epoch + " of a relay cannot be retried (its first attempt took the"
              + " consumer of the epoch before); the run fails and its restart resumes");
    }
    long timeoutMs = task.deadlineMs + task.relayWaitMs + BATON_GRACE_MS - System.currentTimeMillis();
    try {
      // The fault hook's point "replication.relay_take" (core/faults.py): a pause here makes
      // this task late, so the one before hands over only after its relay wait.
      FaultPoints.hit("replication.relay_take");
      return EpochRelay.take(task.placeIn(), Math.max(1, timeoutMs));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // a killed task
      throw new ReplicationWriteException("interrupted waiting for epoch " + task.epoch
          + "'s baton", e);
    }
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
