package dev.uatu.dispatch;

import io.grpc.ClientCall;
import java.util.concurrent.ScheduledFuture;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Headers;

/**
 * One record being dispatched: where it physically is, what it logically is (the original
 * topic, partition, offset, timestamp and key; for a record of a retry, DLQ or resq topic these
 * come from its DLQMetadata key), and its counters. State changes happen under the object's
 * lock: a callback thread, a timer and the task thread (head-of-line) can all touch it.
 */
final class Message {
  /** Where a record is in its dispatch. */
  enum State {
    WAITING, // for a rate limiter, a permit or a retry timer
    CALLING,
    DECIDING, // its answer is being routed
    PRODUCING, // to a retry tier, the DLQ or the resq
    CANCELED, // taken by the head-of-line rule
    DONE
  }

  final String physicalTopic;
  final int physicalPartition;
  final long physicalOffset;
  final String logicalTopic;
  final int logicalPartition;
  final long logicalOffset;
  final long logicalTimestampMs;
  final byte[] key; // the original key (null when it was null)
  final byte[] value;
  final Headers headers;
  final boolean undecodable; // a retry/DLQ/resq record whose key is not a DLQMetadata

  volatile State state = State.WAITING;
  long retryCount;
  long timeoutCount;
  long attempt; // uForwarder's dispatch attempt: 0 for the first call
  long inMemoryRetries; // in-memory retries so far (their backoff doubles)
  long produceFailures;
  ClientCall<byte[], byte[]> call;
  ScheduledFuture<?> timer;

  private Message(
      ConsumerRecord<byte[], byte[]> record,
      String logicalTopic,
      int logicalPartition,
      long logicalOffset,
      long logicalTimestampMs,
      byte[] key,
      long retryCount,
      long timeoutCount,
      boolean undecodable) {
    this.physicalTopic = record.topic();
    this.physicalPartition = record.partition();
    this.physicalOffset = record.offset();
    this.logicalTopic = logicalTopic;
    this.logicalPartition = logicalPartition;
    this.logicalOffset = logicalOffset;
    this.logicalTimestampMs = logicalTimestampMs;
    this.key = key;
    this.value = record.value();
    this.headers = record.headers();
    this.retryCount = retryCount;
    this.timeoutCount = timeoutCount;
    this.undecodable = undecodable;
  }

  /** A record of the JobGroup's source topic, or of one of its retry/DLQ/resq topics. */
  static Message of(ConsumerRecord<byte[], byte[]> record, Routing.Kind kind) {
    if (kind != Routing.Kind.MAIN) {
      DlqMetadata meta = DlqMetadata.decode(record.key());
      if (meta != null && !meta.topic.isEmpty()) {
        return new Message(
            record,
            meta.topic,
            meta.partition,
            meta.offset,
            meta.timestampMs,
            meta.data,
            meta.retryCount,
            meta.timeoutCount,
            false);
      }
      // Not written by a dispatcher: dispatch it as an original record of this topic.
      return new Message(
          record, record.topic(), record.partition(), record.offset(), record.timestamp(),
          record.key(), 0, 0, true);
    }
    return new Message(
        record, record.topic(), record.partition(), record.offset(), record.timestamp(),
        record.key(), 0, 0, false);
  }

  int valueBytes() {
    return value == null ? 0 : value.length;
  }

  /** The key written to a retry, DLQ or resq topic. */
  byte[] dlqMetadataKey() {
    return new DlqMetadata(
            retryCount, logicalTopic, logicalPartition, logicalOffset, logicalTimestampMs, key,
            timeoutCount)
        .encode();
  }
}
