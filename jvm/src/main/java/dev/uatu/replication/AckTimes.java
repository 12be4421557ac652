package dev.uatu.replication;

import dev.uatu.faults.FaultPoints;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.Callback;

/**
 * When each record a task sent was acknowledged, and the first failure.
 *
 * <p>The task thread numbers its records ({@link #next}); the producer's I/O thread writes each
 * ack time into that slot. Slots are in chunks that only the task thread allocates, so the I/O
 * thread never sees a resize. The times are read after {@link #awaitAll}, which waits for every
 * callback of this task's records (the producer's {@code flush()} would also wait for other
 * tasks sharing the producer).
 */
final class AckTimes {
  private static final int CHUNK = 1 << 16;

  private final List<long[]> chunks = new ArrayList<>();
  private final AtomicReference<Exception> firstError = new AtomicReference<>();
  private final AtomicLong failures = new AtomicLong();
  private final AtomicInteger completed = new AtomicInteger();
  private int count;

  /** A callback for the next record, which records its ack time or its failure. */
  Callback next() {
    final int index = count++;
    if (index / CHUNK == chunks.size()) {
      chunks.add(new long[CHUNK]);
    }
    final long[] chunk = chunks.get(index / CHUNK);
    final int slot = index % CHUNK;
    return (metadata, delivered) -> {
      // The fault hook's point "replication.record_acked" (core/faults.py): a crash here
      // leaves acknowledged records that no stats row counts yet.
      Exception exception =
          delivered != null ? delivered : FaultPoints.failure("replication.record_acked");
      if (exception != null) {
        failures.incrementAndGet();
        firstError.compareAndSet(null, exception);
      } else {
        chunk[slot] = System.currentTimeMillis();
      }
      completed.incrementAndGet(); // after the slot's write, which awaitAll then sees
    };
  }

  /**
   * Waits until every record handed out so far was acknowledged or failed; false if that took
   * longer than {@code timeoutMs}. The producer completes each record within its
   * delivery.timeout.ms, so a longer wait means the producer itself is stuck.
   */
  boolean awaitAll(long timeoutMs) throws InterruptedException {
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    while (completed.get() < count) {
      if (System.nanoTime() > deadline) {
        return false;
      }
      Thread.sleep(1);
    }
    return true;
  }

  /** Number of records handed out so far. */
  int count() {
    return count;
  }

  /** Ack time of record {@code index} (valid after a flush without failures). */
  long at(int index) {
    return chunks.get(index / CHUNK)[index % CHUNK];
  }

  boolean failed() {
    return firstError.get() != null;
  }

  long failures() {
    return failures.get();
  }

  Exception firstError() {
    return firstError.get();
  }
}
