package dev.uatu.replication;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The provenance stamp of one source partition: a single header {@code uatu.src} whose value
 * is {@code <cluster>/<topic>/<partition>/<offset>} in UTF-8.
 *
 * <p>One header rather than four: the producer sizes and encodes every header key of every
 * record, so fewer headers make every copied record cheaper. A topic name has no {@code /}, so the
 * value parses from the right even when a cluster name has one. A record copied twice
 * (A to B to C) carries a stamp per hop, the later one last. Public for the tests, which
 * check it against the Python reader ({@code core/provenance.py}).
 */
public final class Provenance {
  public static final String KEY = "uatu.src";

  private final byte[] prefix; // "<cluster>/<topic>/<partition>/"

  public Provenance(String cluster, String topic, int partition) {
    this.prefix = (cluster + "/" + topic + "/" + partition + "/").getBytes(StandardCharsets.UTF_8);
  }

  /** The stamp of the record at {@code offset} of this source partition. */
  public Header stamp(long offset) {
    String digits = Long.toString(offset);
    byte[] value = Arrays.copyOf(prefix, prefix.length + digits.length());
    for (int i = 0; i < digits.length(); i++) {
      value[prefix.length + i] = (byte) digits.charAt(i); // ASCII digits (and '-')
    }
    return new RecordHeader(KEY, value);
  }

  /** The source offset the record's last stamp names, or -1 when that stamp is not ours. */
  public long offsetIn(Headers headers) {
    Header last = headers.lastHeader(KEY);
    byte[] value = last == null ? null : last.value();
    if (value == null
        || value.length <= prefix.length
        || !Arrays.equals(value, 0, prefix.length, prefix, 0, prefix.length)) {
      return -1;
    }
    try {
      return Long.parseLong(
          new String(value, prefix.length, value.length - prefix.length, StandardCharsets.US_ASCII));
    } catch (NumberFormatException e) {
      return -1; // written by something else under our key
    }
  }
}
