package dev.uatu.replication;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.spark.api.java.JavaFutureAction;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The continuous copy's driver loop: epochs of long-running copy tasks ({@link StreamCopier}),
 * one Spark job per epoch, each task copying its share of the source partitions from where the
 * epoch before stopped until the epoch's deadline.
 *
 * <p>Runs in a thread of the driver's JVM, so the copy never waits on Python, and each
 * finished epoch is put on a queue that the Python driver drains at its own pace to write the
 * stats ({@link #poll}). A failed epoch (a task out of attempts) ends the loop; {@link
 * #failure} says why. The next epoch's job is submitted:
 *
 * <ul>
 *   <li>in a relay (local mode), as soon as the epoch before starts: its tasks take over from
 *       that epoch's in this JVM at the deadline ({@link EpochRelay}), so no record waits for a
 *       hand-over;
 *   <li>otherwise as soon as the epoch before returns: a record that arrives meanwhile waits
 *       for the acks of the last records, the job's end and the next job's start.
 * </ul>
 *
 * <p>Partitions are spread over at most {@code maxTasks} tasks, as MirrorMaker 2 spreads them
 * over {@code tasks.max}: the caller leaves task slots free for the stats jobs, which would
 * otherwise wait for an epoch to end.
 */
public final class ContinuousCopy {
  private static final Logger LOG = LoggerFactory.getLogger(ContinuousCopy.class);

  private final JavaSparkContext sc;
  private final CopyConfig config;
  private final long epochMs;
  private final int maxTasks;
  private final boolean relay;
  private final String runId = UUID.randomUUID().toString();
  private final TreeMap<Integer, Long> positions; // source partition -> next offset to read
  // source partition -> highest source offset the destination holds (EpochResult#heldUpTo)
  private final Map<Integer, Long> held = new HashMap<>();
  // source partition -> when the last epoch's task stopped polling it (wall clock ms)
  private final Map<Integer, Long> lastPollEnded = new HashMap<>();
  private final BlockingQueue<CopiedEpoch> finished = new LinkedBlockingQueue<>();
  private final Thread thread;
  private volatile boolean stopping;
  private volatile String failure;

  /**
   * @param starts each source partition to copy and the offset to start it at
   * @param epochMs how long each epoch's tasks copy before they report
   * @param maxTasks the most tasks an epoch runs (at least 1)
   * @param relay whether each epoch's job is submitted while the one before runs, its tasks
   *     taking over from the ones before in this JVM ({@link EpochRelay}): local mode only, with
   *     task slots for two epochs' tasks
   */
  public ContinuousCopy(
      SparkSession spark,
      CopyConfig config,
      Map<?, ?> starts,
      long epochMs,
      int maxTasks,
      boolean relay) {
    this.sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    this.config = config;
    this.epochMs = epochMs;
    this.maxTasks = Math.max(1, maxTasks);
    this.relay = relay;
    this.positions = new TreeMap<>();
    starts.forEach((p, o) -> positions.put(((Number) p).intValue(), ((Number) o).longValue()));
    this.thread = new Thread(this::run, "uatu-continuous-copy");
    this.thread.setDaemon(true);
  }

  public void start() {
    thread.start();
  }

  /** The next finished epoch, waiting up to {@code timeoutMs}; null if none finished. */
  public CopiedEpoch poll(long timeoutMs) throws InterruptedException {
    return finished.poll(timeoutMs, TimeUnit.MILLISECONDS);
  }

  /** Every epoch finished and not yet taken, oldest first, without waiting. */
  public List<CopiedEpoch> drain() {
    List<CopiedEpoch> epochs = new ArrayList<>();
    finished.drainTo(epochs);
    return epochs;
  }

  /**
   * Ends the copy after the running epoch: its tasks stop at their next poll where they run in
   * this JVM (local mode), at the epoch's deadline elsewhere. Its records are acknowledged and
   * its epoch queued before the loop ends.
   */
  public void requestStop() {
    stopping = true;
    StreamCopier.requestStop(runId);
  }

  /** Waits up to {@code timeoutMs} for the loop to end; true if it has. */
  public boolean join(long timeoutMs) throws InterruptedException {
    thread.join(timeoutMs);
    return !thread.isAlive();
  }

  public boolean isRunning() {
    return thread.isAlive();
  }

  /** Why the loop ended without being asked to, or null. */
  public String failure() {
    return failure;
  }

  private void run() {
    long epoch = 0;
    long deadline = System.currentTimeMillis() + epochMs;
    try {
      JavaFutureAction<List<EpochResult>> current = submit(epoch, deadline, true, false);
      while (current != null) {
        // A relay's next epoch is submitted as soon as this one runs: its tasks wait in the
        // JVM for this epoch's tasks to hand over (EpochRelay), so copying never pauses.
        JavaFutureAction<List<EpochResult>> next =
            relay && !stopping ? submit(epoch + 1, deadline + epochMs, false, true) : null;
        List<EpochResult> results = await(current, next);
        long ended = System.currentTimeMillis();
        // A relay's epoch starts when the one before is due to end; a stop can end it sooner.
        long started = Math.min(deadline - epochMs, ended);
        for (EpochResult result : results) {
          Long expected = positions.get(result.partition());
          if (relay && expected != null && result.fromOffset() != expected) {
            throw new IllegalStateException(
                "epoch " + epoch + " of partition " + result.partition() + " started at "
                    + result.fromOffset() + ", not where the epoch before stopped (" + expected
                    + ")");
          }
          positions.put(result.partition(), result.nextOffset());
          held.put(result.partition(), result.heldUpTo());
        }
        logEpoch(epoch, started, ended, results);
        finished.add(new CopiedEpoch(epoch, started, ended, results));
        epoch++;
        if (next != null) {
          current = next;
          deadline += epochMs;
        } else if (!stopping) {
          deadline = System.currentTimeMillis() + epochMs;
          current = submit(epoch, deadline, false, false);
        } else {
          current = null;
        }
      }
    } catch (RuntimeException e) {
      LOG.error("the continuous copy of {} failed in epoch {}", config.sourceTopic, epoch, e);
      Throwable root = e;
      while (root.getCause() != null) {
        root = root.getCause();
      }
      failure = "epoch " + epoch + " failed: " + root;
    } finally {
      StreamCopier.forget(runId);
      EpochRelay.forget(runId);
    }
  }

  /** Submits epoch {@code epoch}'s job, whose tasks copy until {@code deadlineMs}. */
  private JavaFutureAction<List<EpochResult>> submit(
      long epoch, long deadlineMs, boolean scanTail, boolean takesBaton) {
    List<EpochTask> tasks = plan(epoch, scanTail, deadlineMs, takesBaton);
    sc.setJobDescription("replication " + config.sourceTopic + " epoch " + epoch);
    return sc.parallelize(tasks, tasks.size()).mapPartitions(new StreamCopier(config))
        .collectAsync();
  }

  /** The results of {@code job}; if it failed, {@code next} (if any) is cancelled first. */
  private static List<EpochResult> await(
      JavaFutureAction<List<EpochResult>> job, JavaFutureAction<List<EpochResult>> next) {
    try {
      return job.get();
    } catch (ExecutionException | InterruptedException e) {
      if (next != null) {
        next.cancel(true);
      }
      if (e instanceof InterruptedException) {
        Thread.currentThread().interrupt();
      }
      throw new IllegalStateException("an epoch's job failed", e);
    }
  }

  /**
   * One line per epoch: what it read, and its hand-over, the longest any partition went
   * unpolled since the epoch before (the wait of a record that arrived then), split into the
   * job's submission to its first poll and its last poll to its results in this thread.
   */
  private void logEpoch(long epoch, long started, long ended, List<EpochResult> results) {
    long read = 0;
    long handOverMs = -1; // -1: the run's first epoch, nothing before it
    long firstPoll = Long.MAX_VALUE;
    long lastPoll = 0;
    for (EpochResult result : results) {
      read += result.read();
      firstPoll = Math.min(firstPoll, result.pollStartedMs());
      lastPoll = Math.max(lastPoll, result.pollEndedMs());
      Long previous = lastPollEnded.put(result.partition(), result.pollEndedMs());
      if (previous != null) {
        handOverMs = Math.max(handOverMs, result.pollStartedMs() - previous);
      }
    }
    LOG.info(
        "epoch {} of {}: {} records read in {} ms; hand-over from the epoch before {} ms"
            + " (the longest a partition went unpolled); submitted to first poll {} ms,"
            + " last poll to results {} ms",
        epoch, config.sourceTopic, read, ended - started, handOverMs < 0 ? "n/a" : handOverMs,
        firstPoll - started, ended - lastPoll);
  }

  /** The epoch's tasks: partitions dealt round-robin over at most maxTasks tasks. */
  private List<EpochTask> plan(long epoch, boolean scanTail, long deadlineMs, boolean takesBaton) {
    int count = Math.min(maxTasks, positions.size());
    List<List<Integer>> shares = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      shares.add(new ArrayList<>());
    }
    int i = 0;
    for (int partition : positions.keySet()) {
      shares.get(i++ % count).add(partition);
    }
    List<EpochTask> tasks = new ArrayList<>();
    for (List<Integer> share : shares) {
      int[] partitions = share.stream().mapToInt(Integer::intValue).toArray();
      // A task that takes a baton starts where the epoch before's task hands over, which is
      // not known yet when its job is submitted.
      long[] from = share.stream().mapToLong(p -> takesBaton ? -1L : positions.get(p)).toArray();
      long[] heldUpTo =
          share.stream().mapToLong(p -> takesBaton ? -1L : held.getOrDefault(p, -1L)).toArray();
      tasks.add(
          new EpochTask(
              runId, epoch, partitions, from, heldUpTo, scanTail, deadlineMs, count, takesBaton,
              relay, epochMs));
    }
    return tasks;
  }

  /** One finished epoch: what each partition read and sent, and the summary rows. */
  public static final class CopiedEpoch {
    private final long epoch;
    private final long startedMs;
    private final long endedMs;
    private final List<EpochResult> results;

    CopiedEpoch(long epoch, long startedMs, long endedMs, List<EpochResult> results) {
      this.epoch = epoch;
      this.startedMs = startedMs;
      this.endedMs = endedMs;
      this.results = Collections.unmodifiableList(results);
    }

    public long epoch() {
      return epoch;
    }

    public long startedMs() {
      return startedMs;
    }

    public long endedMs() {
      return endedMs;
    }

    public List<EpochResult> results() {
      return results;
    }
  }

  /**
   * The summary rows of {@code epochs} as one local frame in {@code schemaDdl} (Python's {@code
   * writer.SUMMARY_SCHEMA}), for the stats of the epochs written together.
   */
  public static Dataset<Row> summaries(
      SparkSession spark, List<CopiedEpoch> epochs, String schemaDdl) {
    List<Row> rows = new ArrayList<>();
    for (CopiedEpoch epoch : epochs) {
      for (EpochResult result : epoch.results()) {
        rows.addAll(result.summaries());
      }
    }
    return spark.createDataFrame(rows, StructType.fromDDL(schemaDdl));
  }
}
