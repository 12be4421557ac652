package dev.uatu.dispatch;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.Executor;

/**
 * The cap on concurrent outstanding RPCs of one JobGroup in this JVM (uForwarder's outbound
 * message limiter), fixed or adaptive.
 *
 * <p>A reader thread takes a permit with {@link #acquire()} and blocks while none is free: that
 * is the dispatcher's back-pressure on Kafka reads. An in-memory retry, started from a gRPC
 * callback, takes one with {@link #acquireAsync}, which runs it when a permit frees up instead of
 * blocking the callback thread. Waiting retries are served before readers.
 *
 * <p>{@link #release} feeds the RPC's outcome to the limit: with {@code max_inflight_messages}
 * above 0 the limit is that number; otherwise it is {@link VegasLimit}'s estimate, which
 * grows while latency stays at its no-load level and shrinks when calls queue or fail.
 */
public final class Inflight {
  private final VegasLimit adaptive; // null for a fixed limit
  private final Executor executor;
  private final Deque<Runnable> waiters = new ArrayDeque<>();
  private int limit;
  private int used;
  private int peak;

  private Inflight(int limit, VegasLimit adaptive, Executor executor) {
    this.limit = limit;
    this.adaptive = adaptive;
    this.executor = executor;
  }

  public static Inflight fixed(int limit, Executor executor) {
    return new Inflight(Math.max(1, limit), null, executor);
  }

  public static Inflight adaptive(int hardMax, Executor executor) {
    VegasLimit vegas = new VegasLimit(hardMax);
    return new Inflight(vegas.limit(), vegas, executor);
  }

  public synchronized void acquire() throws InterruptedException {
    while (used >= limit || !waiters.isEmpty()) {
      wait();
    }
    take();
  }

  public void acquireAsync(Runnable onPermit) {
    synchronized (this) {
      if (used >= limit) {
        waiters.add(onPermit);
        return;
      }
      take();
    }
    onPermit.run();
  }

  /** Returns a permit; {@code rttNanos} and {@code dropped} (a timeout or an unusable answer)
   * are the RPC's outcome for the adaptive limit (ignored by a fixed one). */
  public void release(long rttNanos, boolean dropped) {
    Deque<Runnable> granted = new ArrayDeque<>();
    synchronized (this) {
      int inflightAtRelease = used;
      int before = limit;
      used--;
      if (adaptive != null && rttNanos >= 0) {
        limit = adaptive.onSample(rttNanos, inflightAtRelease, dropped);
      }
      while (used < limit && !waiters.isEmpty()) {
        take();
        granted.add(waiters.poll());
      }
      if (used < limit) {
        // One permit freed wakes one blocked reader; a grown limit may free several.
        if (limit > before) {
          notifyAll();
        } else {
          notify();
        }
      }
    }
    for (Runnable r : granted) {
      executor.execute(r);
    }
  }

  /** Returns a permit taken for a call that was never made (its message was cancelled). */
  public void giveBack() {
    release(-1, false);
  }

  public synchronized int limit() {
    return limit;
  }

  public synchronized int used() {
    return used;
  }

  /** The highest number of permits held at once since the last call. */
  public synchronized int takePeak() {
    int p = peak;
    peak = used;
    return p;
  }

  private void take() {
    used++;
    peak = Math.max(peak, used);
  }
}
