package dev.uatu.loadgen;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.spark.sql.Row;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The generators of one partition group, sending from a thread of their own that outlives the
 * Spark tasks: the micro-batches only cut what it sent into batches. Each batch's task asks for
 * a cut a window after the previous one ({@link #requestCut}) and collects the closed segments
 * once their acks are in ({@link #awaitCut}); meanwhile the thread keeps sending on schedule
 * for up to two windows (at least {@link #MIN_LEASE_NANOS}) past the requested cut, so the next
 * batch's start-up (Spark's scheduling, the driver's bookkeeping) leaves no gap in the traffic. Past the lease it waits;
 * a runner nobody renews for {@link #IDLE_EXIT_NANOS} ends.
 *
 * <p>Pacing is record by record: with a rate cap every partition follows a schedule (each
 * record takes 1 / messages_per_sec, or its bytes / bytes_per_sec, whichever is longer); the
 * thread sends whatever is due and parks until the next record is. A schedule that falls more
 * than {@link #MAX_CREDIT_NANOS} behind the clock (a stall) moves up, so a stall never turns
 * into a long burst: what it catches up is at most a quarter second's records, 2.5 % of a 10 s
 * window, inside the 5 % every window holds. Without a cap the partitions take turns as fast as
 * the producer takes records.
 */
final class Runner implements Runnable {
  static final long MIN_LEASE_NANOS = 10_000_000_000L;
  static final long IDLE_EXIT_NANOS = 60_000_000_000L;
  static final long MAX_CREDIT_NANOS = 250_000_000L;
  private static final long MAX_PARK_NANOS = 5_000_000L;
  private static final int LETTER_SLACK = 4096;
  private static final Logger LOG = LoggerFactory.getLogger(Runner.class);

  final String key;
  private final ProduceConfig config;
  private final List<PartitionGenerator> generators = new ArrayList<>();
  private final KafkaProducer<byte[], byte[]> producer;
  final AtomicReference<Exception> error = new AtomicReference<>();
  private final Thread thread;
  private final long startNanos;

  // The cut requested and the lease (written by tasks, read by the thread).
  private volatile long cutBatch = Long.MIN_VALUE;
  private volatile long cutNanos = Long.MAX_VALUE;
  private volatile long leaseNanos;
  private volatile long renewedNanos;
  private volatile boolean stopping;

  // The last cut collected (task threads, one at a time: they hold `tasks`; the generator
  // thread never does).
  private final Object tasks = new Object();
  private long lastCutBatch;
  private long lastCutNanos;

  Runner(String key, ProduceConfig config, TaskPlan plan) {
    this.key = key;
    this.config = config;
    this.producer = Producers.get(config.producerConfig);
    // The topic's metadata now, not at the first send: that would stall the schedule's start.
    producer.partitionsFor(config.topic);
    byte[] letters = letters(config.shape.maxSize() + LETTER_SLACK, config.shape.seed);
    this.startNanos = System.nanoTime();
    long position = startNanos;
    for (PartitionPlan p : plan.partitions) {
      PartitionGenerator g = new PartitionGenerator(config, p, letters, startNanos, error);
      generators.add(g);
      position = Math.max(position, g.position(startNanos));
    }
    this.lastCutBatch = plan.previousBatchId;
    this.lastCutNanos = position; // the first window starts here
    this.leaseNanos = position;
    this.renewedNanos = startNanos;
    this.thread = new Thread(this, "loadgen-" + key);
    this.thread.setDaemon(true);
  }

  void start() {
    thread.start();
  }

  /** True when this runner's last collected cut is the state {@code plan} continues from. */
  boolean continues(TaskPlan plan) {
    synchronized (tasks) {
      return continuesLocked(plan);
    }
  }

  private boolean continuesLocked(TaskPlan plan) {
    if (stopping || error.get() != null || !thread.isAlive()) {
      return false;
    }
    if (lastCutBatch != plan.previousBatchId || plan.partitions.size() != generators.size()) {
      return false;
    }
    for (PartitionPlan p : plan.partitions) {
      Segment last = closedSegment(p.partition, lastCutBatch);
      if (last == null || last.nextSeq != p.nextSeq) {
        return false;
      }
    }
    return true;
  }

  /** Asks for batch {@code batch}'s cut a window after the last one, and renews the lease. */
  void requestCut(long batch, long windowMicros) {
    synchronized (tasks) {
      requestCutLocked(batch, windowMicros);
    }
  }

  private void requestCutLocked(long batch, long windowMicros) {
    long cut = lastCutNanos + windowMicros * 1000L;
    cutNanos = cut;
    cutBatch = batch;
    leaseNanos = cut + Math.max(MIN_LEASE_NANOS, 2 * windowMicros * 1000L);
    renewedNanos = System.nanoTime();
    LockSupport.unpark(thread);
  }

  /** Waits for batch {@code batch}'s cut and its acks; its rows, one per partition. */
  List<Row> awaitCut(long batch, long timeoutMs) throws InterruptedException {
    synchronized (tasks) {
      return awaitCutLocked(batch, timeoutMs);
    }
  }

  private List<Row> awaitCutLocked(long batch, long timeoutMs) throws InterruptedException {
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    for (PartitionGenerator g : generators) {
      while (g.closedUpTo < batch) {
        checkAlive(deadline, "the cut of batch " + batch);
        Thread.sleep(1);
      }
    }
    List<Row> rows = new ArrayList<>();
    for (PartitionGenerator g : generators) {
      Segment segment = g.closed.get(batch);
      while (!segment.acked()) {
        checkAlive(deadline, "the acks of batch " + batch);
        Thread.sleep(1);
      }
      if (error.get() != null) {
        throw failure();
      }
      rows.add(segment.row());
      g.closed.keySet().removeIf(b -> b < lastCutBatch);
    }
    lastCutBatch = batch;
    lastCutNanos = cutNanos;
    return rows;
  }

  /** Stops the thread; the rows of what it sent after the last cut, once acknowledged. */
  List<Row> stop(long timeoutMs) throws InterruptedException {
    stopping = true;
    LockSupport.unpark(thread);
    thread.join(timeoutMs);
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    List<Row> rows = new ArrayList<>();
    for (PartitionGenerator g : generators) {
      Segment open = g.segment;
      while (!open.acked() && error.get() == null && System.nanoTime() < deadline) {
        Thread.sleep(1);
      }
      if (open.records > 0 && open.acked()) {
        g.cut(Long.MAX_VALUE);
        rows.add(open.row());
      }
    }
    return rows;
  }

  private Segment closedSegment(int partition, long batch) {
    for (PartitionGenerator g : generators) {
      if (g.partition == partition) {
        return g.closed.get(batch);
      }
    }
    return null;
  }

  private void checkAlive(long deadline, String what) {
    if (error.get() != null) {
      throw failure();
    }
    if (!thread.isAlive()) {
      throw new LoadGenException("the generator thread of " + key + " ended before " + what);
    }
    if (System.nanoTime() > deadline) {
      throw new LoadGenException(
          "timed out after " + config.ackTimeoutMs + " ms waiting for " + what + " of " + key);
    }
  }

  private LoadGenException failure() {
    Exception e = error.get();
    return new LoadGenException("records to " + config.topic + " were not written: " + e, e);
  }

  /**
   * Sends each generator's first record and waits for the acks before the schedule starts:
   * connecting to the partition leaders and the first sends through a cold JVM would
   * otherwise hold back the first second of records and release them together.
   */
  private void connect() throws InterruptedException {
    long deadline = System.nanoTime() + config.ackTimeoutMs * 1_000_000L;
    List<Segment> first = new ArrayList<>();
    for (PartitionGenerator g : generators) {
      if (!g.done(System.nanoTime())) {
        Segment segment = g.segment;
        producer.send(g.next(), segment.callback());
        first.add(segment);
      }
    }
    for (Segment segment : first) {
      while (!segment.acked() && error.get() == null && System.nanoTime() < deadline) {
        Thread.sleep(1);
      }
    }
    long now = System.nanoTime();
    for (PartitionGenerator g : generators) {
      g.dueNanos = Math.max(g.dueNanos, now);
    }
  }

  @Override
  public void run() {
    int turn = 0;
    try {
      if (config.paced()) {
        connect();
      }
      while (!stopping && error.get() == null) {
        long now = System.nanoTime();
        if (now - renewedNanos > IDLE_EXIT_NANOS) {
          LOG.info("{}: not renewed for {} s, ending", key, IDLE_EXIT_NANOS / 1_000_000_000L);
          break;
        }
        long batch = cutBatch;
        long cut = cutNanos;
        PartitionGenerator next = null;
        for (int i = 0; i < generators.size(); i++) {
          PartitionGenerator g = generators.get(config.paced() ? i : (turn + i) % generators.size());
          if (g.closedUpTo < batch && (g.done(now) || g.position(now) >= cut)) {
            g.cut(batch);
          }
          if (g.done(now)) {
            continue;
          }
          if (config.paced() && now - g.dueNanos > MAX_CREDIT_NANOS) {
            g.dueNanos = now - MAX_CREDIT_NANOS; // a stall buys no burst
          }
          if (next == null || (config.paced() && g.dueNanos < next.dueNanos)) {
            next = g;
          }
        }
        if (next == null) {
          LockSupport.parkNanos(MAX_PARK_NANOS); // every partition done: wait for the cut
          continue;
        }
        long position = next.position(now);
        if (position >= leaseNanos || position >= cut && next.closedUpTo < batch) {
          LockSupport.parkNanos(MAX_PARK_NANOS); // past the lease: wait for the next batch
          continue;
        }
        if (config.paced() && next.dueNanos > now) {
          LockSupport.parkNanos(Math.min((long) next.dueNanos - now, MAX_PARK_NANOS));
          continue;
        }
        Segment segment = next.segment;
        ProducerRecord<byte[], byte[]> record = next.next();
        producer.send(record, segment.callback());
        turn++;
      }
    } catch (RuntimeException e) {
      error.compareAndSet(null, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (error.get() != null) {
      Producers.discard(config.producerConfig, producer);
    }
  }

  /** Random capital letters, as kafka-producer-perf-test's payloads. */
  private static byte[] letters(int n, long seed) {
    SplittableRandom random = new SplittableRandom(seed);
    byte[] out = new byte[n];
    for (int i = 0; i < n; i++) {
      out[i] = (byte) ('A' + random.nextInt(26));
    }
    return out;
  }
}
