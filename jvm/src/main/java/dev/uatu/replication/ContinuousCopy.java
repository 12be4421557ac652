package dev.uatu.replication;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
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
 * <p>Runs in a thread of the driver's JVM, so the copy never waits on Python: the next epoch's
 * job is submitted as soon as the last one returns (the only pause a record can meet is that
 * hand-over: acks of the last records, the job's end and the next job's start), and each
 * finished epoch is put on a queue that the Python driver drains at its own pace to write the
 * stats ({@link #poll}). A failed epoch (a task out of attempts) ends the loop; {@link
 * #failure} says why.
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
   */
  public ContinuousCopy(
      SparkSession spark, CopyConfig config, Map<?, ?> starts, long epochMs, int maxTasks) {
    this.sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    this.config = config;
    this.epochMs = epochMs;
    this.maxTasks = Math.max(1, maxTasks);
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
    boolean first = true;
    try {
      while (!stopping) {
        long started = System.currentTimeMillis();
        List<EpochTask> tasks = plan(epoch, first, started + epochMs);
        sc.setJobDescription("replication " + config.sourceTopic + " epoch " + epoch);
        List<EpochResult> results =
            sc.parallelize(tasks, tasks.size()).mapPartitions(new StreamCopier(config)).collect();
        long ended = System.currentTimeMillis();
        for (EpochResult result : results) {
          positions.put(result.partition(), result.nextOffset());
          held.put(result.partition(), result.heldUpTo());
        }
        logEpoch(epoch, started, ended, results);
        finished.add(new CopiedEpoch(epoch, started, ended, results));
        first = false;
        epoch++;
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
  private List<EpochTask> plan(long epoch, boolean scanTail, long deadlineMs) {
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
      long[] from = share.stream().mapToLong(positions::get).toArray();
      long[] heldUpTo = share.stream().mapToLong(p -> held.getOrDefault(p, -1L)).toArray();
      tasks.add(
          new EpochTask(runId, epoch, partitions, from, heldUpTo, scanTail, deadlineMs, count));
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
