package dev.uatu.loadgen;

import java.io.Serializable;

/**
 * Where one partition's generator starts when its {@link Runner} is (re)started, planned by
 * Python from the saved state ({@code jobs/loadgen/plan.py}): at sequence number {@code
 * nextSeq}, with at most {@code quota} records left, and not past {@code deadlineMicros}
 * (Long.MAX_VALUE: no deadline; negative: that many microseconds after its start). With a rate
 * cap the records follow a schedule that starts at {@code dueMicros} (0: when the runner
 * starts) and the deadline is schedule time; without one it is wall time.
 */
public final class PartitionPlan implements Serializable {
  private static final long serialVersionUID = 1L;

  final int partition;
  final long nextSeq;
  final long quota;
  final long dueMicros;
  final long deadlineMicros;

  public PartitionPlan(
      int partition, long nextSeq, long quota, long dueMicros, long deadlineMicros) {
    this.partition = partition;
    this.nextSeq = nextSeq;
    this.quota = quota;
    this.dueMicros = dueMicros;
    this.deadlineMicros = deadlineMicros;
  }

  @Override
  public String toString() {
    return "partition " + partition + " from seq " + nextSeq + " (quota " + quota + ", due "
        + dueMicros + ", deadline " + deadlineMicros + ")";
  }
}
