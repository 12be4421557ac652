package dev.uatu.replication;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.Row;

/**
 * What an epoch of the continuous copy did with one source partition: it read source offsets
 * {@code [fromOffset, nextOffset)}, sent {@code sent} of those records (every other one the
 * destination held already: every offset up to {@code heldUpTo}), all acknowledged, and
 * {@code summaries} are their summary rows (Python's {@code writer.SUMMARY_SCHEMA}). Its task
 * polled from {@code pollStartedMs} to {@code pollEndedMs} (wall clock): between one epoch's
 * last poll and the next one's first, the partition's new records wait.
 */
public final class EpochResult implements Serializable {
  private static final long serialVersionUID = 1L;

  private final int partition;
  private final long fromOffset;
  private final long nextOffset;
  private final long heldUpTo;
  private final long read;
  private final long sent;
  private final List<Row> summaries;
  private final long pollStartedMs;
  private final long pollEndedMs;

  EpochResult(
      int partition,
      long fromOffset,
      long nextOffset,
      long heldUpTo,
      long read,
      long sent,
      List<Row> summaries,
      long pollStartedMs,
      long pollEndedMs) {
    this.partition = partition;
    this.fromOffset = fromOffset;
    this.nextOffset = nextOffset;
    this.heldUpTo = heldUpTo;
    this.read = read;
    this.sent = sent;
    this.summaries = summaries;
    this.pollStartedMs = pollStartedMs;
    this.pollEndedMs = pollEndedMs;
  }

  public int partition() {
    return partition;
  }

  public long fromOffset() {
    return fromOffset;
  }

  public long nextOffset() {
    return nextOffset;
  }

  /** The highest source offset the destination holds after this epoch (-1: none known). */
  public long heldUpTo() {
    return Math.max(heldUpTo, nextOffset - 1);
  }

  public long read() {
    return read;
  }

  public long sent() {
    return sent;
  }

  public List<Row> summaries() {
    return summaries;
  }

  public long pollStartedMs() {
    return pollStartedMs;
  }

  public long pollEndedMs() {
    return pollEndedMs;
  }
}
