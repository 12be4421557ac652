package dev.uatu.replication;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * Where one epoch's copy task hands its partitions to the next epoch's task in the same JVM,
 * so the copy never stops polling between epochs (the relay of {@link ContinuousCopy}, local
 * mode only).
 *
 * <p>The next epoch's job is submitted while the epoch before still runs, so its task is
 * waiting here when the one before reaches its deadline. The one before then stops polling,
 * leaves a {@link Baton} (its consumer, still assigned, where it stopped; what the destination
 * holds; its pending acknowledgements) and only then waits for its acks and reports; the next
 * one polls on with the same consumer at once. If the next task is late, the one before keeps
 * copying up to one more epoch for it, then leaves the baton and ends: the late task takes it
 * whenever it comes, and only that hand-over is a pause.
 *
 * <p>A task that fails before it leaves its baton closes its place instead, so the task
 * waiting there ends rather than waits for a consumer nobody will hand over.
 */
final class EpochRelay {
  private static final Map<String, Place> PLACES = new ConcurrentHashMap<>();

  private EpochRelay() {}

  /** What one epoch's task leaves the next one for its partitions. */
  record Baton(
      KafkaConsumer<byte[], byte[]> consumer,
      Map<TopicPartition, Long> positions, // each partition's next offset to read
      Map<Integer, Long> heldUpTo, // source partition -> highest offset the destination holds
      AckTimes previousAcks) {} // the task before's records, maybe not all acknowledged yet

  /** The place of the hand-over into {@code epoch} of one task's partitions. */
  static String place(String runId, long epoch, int[] partitions) {
    return runId + "/" + epoch + "/" + java.util.Arrays.toString(partitions);
  }

  /** Whether the task of {@code place} is waiting for its baton. */
  static boolean successorWaiting(String place) {
    Place p = PLACES.get(place);
    return p != null && p.waiting();
  }

  /** Leaves {@code baton} at {@code place} for the next epoch's task, waiting or not. */
  static void leave(String place, Baton baton) {
    PLACES.computeIfAbsent(place, k -> new Place()).leave(baton);
  }

  /**
   * Closes {@code place} without a baton (its task failed): the task waiting there, or coming,
   * gets none.
   */
  static void close(String place) {
    PLACES.computeIfAbsent(place, k -> new Place()).leave(null);
  }

  /**
   * The baton left at {@code place}, waiting for it up to {@code timeoutMs}; null if the place
   * was closed. Throws if nothing came in time: the epoch before ran in another JVM (a relay
   * needs local mode) or hung.
   */
  static Baton take(String place, long timeoutMs) throws InterruptedException {
    Place p = PLACES.computeIfAbsent(place, k -> new Place());
    try {
      return p.take(place, timeoutMs);
    } finally {
      PLACES.remove(place, p);
    }
  }

  /** Drops every place of {@code runId}, closing the consumers of batons nobody took. */
  static void forget(String runId) {
    PLACES.entrySet().removeIf(e -> {
      if (!e.getKey().startsWith(runId + "/")) {
        return false;
      }
      e.getValue().abandon();
      return true;
    });
  }

  private static final class Place {
    private boolean waiting;
    private boolean left;
    private Baton baton;

    synchronized boolean waiting() {
      return waiting;
    }

    synchronized void leave(Baton b) {
      baton = b;
      left = true;
      notifyAll();
    }

    synchronized Baton take(String name, long timeoutMs) throws InterruptedException {
      waiting = true;
      long until = System.currentTimeMillis() + timeoutMs;
      while (!left) {
        long rest = until - System.currentTimeMillis();
        if (rest <= 0) {
          throw new ReplicationWriteException(
              "no task of the epoch before handed over in " + timeoutMs + " ms (" + name
                  + "): a relay needs every task in the driver's JVM (local mode)");
        }
        wait(rest);
      }
      Baton b = baton;
      baton = null;
      return b;
    }

    synchronized void abandon() {
      if (baton != null) {
        Clients.discardConsumer(baton.consumer());
        baton = null;
      }
      left = true;
      notifyAll();
    }
  }
}
