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
      long sourceTimeoutMs) {
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
