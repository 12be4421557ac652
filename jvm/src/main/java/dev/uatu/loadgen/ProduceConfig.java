package dev.uatu.loadgen;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

/** Everything a producer task needs besides its plan, built once per job by Python. */
public final class ProduceConfig implements Serializable {
  private static final long serialVersionUID = 1L;

  final String topic;
  final HashMap<String, String> producerConfig;
  final String generatorPrefix; // generator id = prefix + partition
  final RecordShape shape;
  final double messagesPerSecond; // per partition; 0 = no cap
  final double bytesPerSecond; // per partition (key + value bytes); 0 = no cap
  final long ackTimeoutMs;

  public ProduceConfig(
      String topic,
      Map<String, String> producerConfig,
      String generatorPrefix,
      RecordShape shape,
      double messagesPerSecond,
      double bytesPerSecond,
      long ackTimeoutMs) {
    this.topic = topic;
    this.producerConfig = new HashMap<>(producerConfig);
    this.generatorPrefix = generatorPrefix;
    this.shape = shape;
    this.messagesPerSecond = messagesPerSecond;
    this.bytesPerSecond = bytesPerSecond;
    this.ackTimeoutMs = ackTimeoutMs;
  }

  boolean paced() {
    return messagesPerSecond > 0 || bytesPerSecond > 0;
  }

  /** Nanoseconds of schedule one record of {@code bytes} key + value bytes takes. */
  double costNanos(int bytes) {
    double cost = 0;
    if (messagesPerSecond > 0) {
      cost = 1e9 / messagesPerSecond;
    }
    if (bytesPerSecond > 0) {
      cost = Math.max(cost, bytes * 1e9 / bytesPerSecond);
    }
    return cost;
  }
}
