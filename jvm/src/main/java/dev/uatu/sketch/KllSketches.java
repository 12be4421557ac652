package dev.uatu.sketch;

import java.util.List;
import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.datasketches.kll.KllLongsSketch;
import org.apache.datasketches.memory.Memory;
import org.apache.datasketches.quantilescommon.QuantileSearchCriteria;

/**
 * KLL sketches in the forms Spark's {@code kll_sketch_*} SQL functions read and write, so the
 * sketches the project's JVM code builds merge with Spark's ({@code kll_merge_agg_double},
 * {@code kll_merge_agg_bigint}) and answer the same quantiles ({@code
 * kll_sketch_get_quantile_*}).
 */
public final class KllSketches {
  /** Spark's default k for {@code kll_sketch_agg_*} (about 1.65 % rank error). */
  public static final int K = 200;

  private KllSketches() {}

  /** An empty doubles sketch of Spark's k. */
  public static KllDoublesSketch doubles() {
    return KllDoublesSketch.newHeapInstance(K);
  }

  /** An empty bigint (longs) sketch of Spark's k. */
  public static KllLongsSketch longs() {
    return KllLongsSketch.newHeapInstance(K);
  }

  /** As {@code kll_sketch_agg_double} writes it: merged into an empty sketch, compact image. */
  public static byte[] image(KllDoublesSketch partial) {
    KllDoublesSketch merged = doubles();
    merged.merge(partial);
    return merged.toByteArray();
  }

  /** As {@code kll_sketch_agg_bigint} writes it: merged into an empty sketch, compact image. */
  public static byte[] image(KllLongsSketch partial) {
    KllLongsSketch merged = longs();
    merged.merge(partial);
    return merged.toByteArray();
  }

  /** {@code kll_merge_agg_bigint} of these images; null if there are none. */
  public static byte[] mergeLongs(List<byte[]> images) {
    if (images.isEmpty()) {
      return null;
    }
    KllLongsSketch merged = longs();
    for (byte[] image : images) {
      merged.merge(KllLongsSketch.heapify(Memory.wrap(image)));
    }
    return merged.toByteArray();
  }

  /** {@code kll_sketch_get_quantile_bigint(image, rank)}; null for no image or no values. */
  public static Long quantile(byte[] image, double rank) {
    if (image == null) {
      return null;
    }
    KllLongsSketch sketch = KllLongsSketch.heapify(Memory.wrap(image));
    return sketch.isEmpty() ? null : sketch.getQuantile(rank, QuantileSearchCriteria.INCLUSIVE);
  }

  /** {@code kll_sketch_get_quantile_double(sketch, rank)}; null for no sketch or no values. */
  public static Double quantile(KllDoublesSketch sketch, double rank) {
    if (sketch == null || sketch.isEmpty()) {
      return null;
    }
    return sketch.getQuantile(rank, QuantileSearchCriteria.INCLUSIVE);
  }
}
