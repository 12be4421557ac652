package dev.uatu.dispatch;

import java.io.Serializable;

/** Offsets [fromOffset, untilOffset) of one partition of one topic: one dispatch task's work. */
public final class Range implements Serializable {
  private static final long serialVersionUID = 1L;
  public final String topic;
  public final int partition;
  public final long fromOffset;
  public final long untilOffset;

  public Range(String topic, int partition, long fromOffset, long untilOffset) {
    this.topic = topic;
    this.partition = partition;
    this.fromOffset = fromOffset;
    this.untilOffset = untilOffset;
  }

  @Override
  public String toString() {
    return topic + "-" + partition + "[" + fromOffset + ", " + untilOffset + ")";
  }
}
