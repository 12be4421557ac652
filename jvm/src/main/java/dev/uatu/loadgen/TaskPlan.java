package dev.uatu.loadgen;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/**
 * One producer task of one micro-batch: a group of partitions, the batch it collects, the
 * batch the saved state continues ({@code previousBatchId}, -1 for none), and how much
 * schedule (paced) or wall (unpaced) time the batch covers.
 */
public final class TaskPlan implements Serializable {
  private static final long serialVersionUID = 1L;

  final long batchId;
  final long previousBatchId;
  final long windowMicros;
  final ArrayList<PartitionPlan> partitions;

  public TaskPlan(
      long batchId, long previousBatchId, long windowMicros, List<PartitionPlan> partitions) {
    this.batchId = batchId;
    this.previousBatchId = previousBatchId;
    this.windowMicros = windowMicros;
    this.partitions = new ArrayList<>(partitions);
  }

  /** The runner key of this task's partition group. */
  String key(ProduceConfig config) {
    StringBuilder key = new StringBuilder(config.generatorPrefix).append('|');
    partitions.stream().mapToInt(p -> p.partition).sorted().forEach(p -> key.append(p).append(','));
    return key.toString();
  }
}
