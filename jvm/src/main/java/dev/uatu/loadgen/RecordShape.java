package dev.uatu.loadgen;

import java.io.Serializable;
import java.util.List;

/**
 * The shape of generated records ({@code uatu.v1.LoadGenOptions} fields 1-19, checked by
 * Python's {@code jobs/loadgen/spec.py}): value sizes, keys, duplicates, late and untimed
 * records, JSON or byte payloads. Every draw is a hash of (seed, partition, sequence number),
 * so a record is the same whichever task or batch makes it.
 */
public final class RecordShape implements Serializable {
  private static final long serialVersionUID = 1L;

  static final int FIXED = 0;
  static final int UNIFORM = 1;
  static final int WEIGHTED = 2;

  final int kind;
  final int[] sizes; // fixed: {n}; uniform: {min, max}; weighted: the sizes
  final double[] cumulative; // weighted: cumulative probabilities, the last is 1
  final long keyCardinality; // 0: no key
  final double duplicatesPerOriginal; // duplicate_ratio / (1 - duplicate_ratio)
  final double untimedRatio;
  final double lateRatio;
  final long latenessMs;
  final String jsonField; // null: byte values, event time in the Kafka timestamp
  final long seed;

  public RecordShape(
      String kind,
      List<Integer> sizes,
      List<Double> weights,
      long keyCardinality,
      double duplicateRatio,
      double lateRatio,
      long latenessMs,
      double untimedRatio,
      String jsonField,
      long seed) {
    switch (kind) {
      case "fixed" -> this.kind = FIXED;
      case "uniform" -> this.kind = UNIFORM;
      case "weighted" -> this.kind = WEIGHTED;
      default -> throw new IllegalArgumentException("unknown size distribution " + kind);
    }
    this.sizes = sizes.stream().mapToInt(Integer::intValue).toArray();
    this.cumulative = new double[weights.size()];
    double total = weights.stream().mapToDouble(Double::doubleValue).sum();
    double sum = 0;
    for (int i = 0; i < weights.size(); i++) {
      sum += weights.get(i);
      cumulative[i] = sum / total;
    }
    if (cumulative.length > 0) {
      cumulative[cumulative.length - 1] = 1.0;
    }
    this.keyCardinality = keyCardinality;
    this.duplicatesPerOriginal = duplicateRatio / (1.0 - duplicateRatio);
    this.lateRatio = lateRatio;
    this.latenessMs = latenessMs;
    this.untimedRatio = untimedRatio;
    this.jsonField = jsonField == null || jsonField.isEmpty() ? null : jsonField;
    this.seed = seed;
  }

  int maxSize() {
    int max = 0;
    for (int s : sizes) {
      max = Math.max(max, s);
    }
    return max;
  }

  int size(double u) {
    switch (kind) {
      case FIXED:
        return sizes[0];
      case UNIFORM:
        return sizes[0] + (int) Math.min(sizes[1] - sizes[0], (long) (u * (sizes[1] - sizes[0] + 1L)));
      default:
        for (int i = 0; i < cumulative.length; i++) {
          if (u < cumulative[i]) {
            return sizes[i];
          }
        }
        return sizes[sizes.length - 1];
    }
  }

  /** Duplicates that follow the original with draw {@code u}: floor(q), plus one with
   * probability frac(q), for q duplicates per original on average. */
  int duplicates(double u) {
    double whole = Math.floor(duplicatesPerOriginal);
    return (int) whole + (u < duplicatesPerOriginal - whole ? 1 : 0);
  }
}
