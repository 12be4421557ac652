package dev.uatu.replication;

import java.io.Serializable;

/**
 * What one task of one epoch of the continuous copy does ({@link StreamCopier}): copy the
 * source partitions {@code partitions}, each from its offset in {@code fromOffsets}, until
 * {@code deadlineMs} (epoch milliseconds) or until its run is asked to stop. A record at or
 * below its partition's {@code heldUpTo} is already at the destination and is not sent again.
 *
 * <p>In a relay ({@link EpochRelay}), a task that {@code takesBaton} gets its consumer, offsets
 * and held offsets from the epoch before's task instead ({@code fromOffsets} and {@code
 * heldUpTo} are then unknown, -1); one that {@code leavesBaton} hands them on to the next
 * epoch's task at its deadline, or up to {@code relayWaitMs} later if that task is late.
 */
public final class EpochTask implements Serializable {
  private static final long serialVersionUID = 1L;

  final String runId; // the continuous copy this epoch belongs to (its stop flag)
  final long epoch;
  final int[] partitions;
  final long[] fromOffsets;
  final long[] heldUpTo; // highest source offset the destination is known to hold, or -1
  final boolean scanTail; // read the destination's tail first (the run's first epoch)
  final long deadlineMs;
  final int tasks; // tasks of this epoch: each takes its share of the flow control
  final boolean takesBaton;
  final boolean leavesBaton;
  final long relayWaitMs;

  EpochTask(
      String runId,
      long epoch,
      int[] partitions,
      long[] fromOffsets,
      long[] heldUpTo,
      boolean scanTail,
      long deadlineMs,
      int tasks,
      boolean takesBaton,
      boolean leavesBaton,
      long relayWaitMs) {
    this.runId = runId;
    this.epoch = epoch;
    this.partitions = partitions;
    this.fromOffsets = fromOffsets;
    this.heldUpTo = heldUpTo;
    this.scanTail = scanTail;
    this.deadlineMs = deadlineMs;
    this.tasks = tasks;
    this.takesBaton = takesBaton;
    this.leavesBaton = leavesBaton;
    this.relayWaitMs = relayWaitMs;
  }

  /** Where this task takes its baton from the epoch before's task. */
  String placeIn() {
    return EpochRelay.place(runId, epoch, partitions);
  }

  /** Where this task leaves its baton for the next epoch's task. */
  String placeOut() {
    return EpochRelay.place(runId, epoch + 1, partitions);
  }
}
