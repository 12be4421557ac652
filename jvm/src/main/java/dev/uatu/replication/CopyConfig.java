package dev.uatu.replication;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Everything a copy task needs, shipped to the executors with the task. Built once per job by
 * the Python driver ({@code jobs/replication/writer.py}) through py4j.
 */
public final class CopyConfig implements Serializable {
  private static final long serialVersionUID = 1L;

  final String sourceCluster;
  final String sourceTopic;
  final String destinationTopic;
  final HashMap<String, String> producerConfig;
  final HashMap<String, String> consumerConfig; // reads the destination's tail
  final HashMap<String, String> sourceConsumerConfig; // reads the source ranges
  final HashMap<Integer, Integer> partitionMap; // source partition -> destination partition
  final ArrayList<String[]> extraHeaders; // (name, value) stamped on every copy, in order
  final long auditIntervalMs; // width of the windows of the summary rows
  final int scanLimit; // records read back at most to find the last stamp
  final long sourceTimeoutMs; // a source partition silent this long fails the task
  final String flowKey; // the JobGroup: tasks of one key share its flow control in a JVM
  final double maxRecordsPerSec; // flow control, 0 = unlimited
  final double maxBytesPerSec; // key + value bytes, 0 = unlimited

  public CopyConfig(
      String sourceCluster,
      String sourceTopic,
      String destinationTopic,
      Map<String, String> producerConfig,
      Map<String, String> consumerConfig,
      Map<String, String> sourceConsumerConfig,
      Map<Integer, Integer> partitionMap,
      Map<String, String> extraHeaders,
      long auditIntervalMs,
      int scanLimit,
      long sourceTimeoutMs,
      String flowKey,
      double maxRecordsPerSec,
      double maxBytesPerSec) {
    this.sourceCluster = sourceCluster;
    this.sourceTopic = sourceTopic;
    this.destinationTopic = destinationTopic;
    this.producerConfig = new HashMap<>(producerConfig);
    this.consumerConfig = new HashMap<>(consumerConfig);
    this.sourceConsumerConfig = new HashMap<>(sourceConsumerConfig);
    this.partitionMap = new HashMap<>(partitionMap);
    this.extraHeaders = new ArrayList<>();
    for (Map.Entry<String, String> e : new LinkedHashMap<>(extraHeaders).entrySet()) {
      this.extraHeaders.add(new String[] {e.getKey(), e.getValue()});
    }
    this.auditIntervalMs = auditIntervalMs;
    this.scanLimit = scanLimit;
    this.sourceTimeoutMs = sourceTimeoutMs;
    this.flowKey = flowKey;
    this.maxRecordsPerSec = maxRecordsPerSec;
    this.maxBytesPerSec = maxBytesPerSec;
  }

  /**
   * Joins this JobGroup's {@link FlowLimiter} in this JVM for a task of a job of {@code tasks}
   * tasks, or returns null without flow control. Call {@link #leaveFlow} when the task ends.
   */
  FlowLimiter joinFlow(int tasks) {
    return FlowLimiter.join(flowKey, maxRecordsPerSec, maxBytesPerSec, flowShare(tasks));
  }

  void leaveFlow(FlowLimiter limiter, int tasks) {
    if (limiter != null) {
      limiter.leave(flowShare(tasks));
    }
  }

  /** In local mode (the driver's JVM runs every task) a task may use the whole caps. */
  private static double flowShare(int tasks) {
    org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
    boolean local = env == null || "driver".equals(env.executorId());
    return local ? 1.0 : 1.0 / Math.max(1, tasks);
  }

  int destinationPartition(int sourcePartition) {
    Integer destination = partitionMap.get(sourcePartition);
    if (destination == null) {
      throw new ReplicationWriteException(
          "source partition " + sourcePartition + " of " + sourceTopic
              + " has no destination partition (the plan covers " + partitionMap.keySet() + ")");
    }
    return destination;
  }

  List<String[]> extraHeaders() {
    return extraHeaders;
  }
}
