package dev.uatu.audit;

/**
 * A set of 64-bit dedupe hashes: open addressing with linear probing over a {@code long[]}, so
 * one key costs 8 bytes at full load and 16 on average (the table doubles at half full), and
 * an insert is one or two cache misses. Zero, the empty-slot marker, is tracked apart.
 */
final class LongHashSet {
  private static final int MIN_CAPACITY = 16;

  private long[] slots;
  private int mask;
  private int size;
  private boolean hasZero;

  LongHashSet() {
    this(MIN_CAPACITY);
  }

  LongHashSet(int expected) {
    int capacity = MIN_CAPACITY;
    while (capacity < 2L * expected) {
      capacity <<= 1;
    }
    slots = new long[capacity];
    mask = capacity - 1;
  }

  /** Adds {@code key}; true when it was not in the set. */
  boolean add(long key) {
    if (key == 0) {
      if (hasZero) {
        return false;
      }
      hasZero = true;
      return true;
    }
    int i = index(key);
    while (true) {
      long slot = slots[i];
      if (slot == 0) {
        slots[i] = key;
        if (++size * 2 > slots.length) {
          grow();
        }
        return true;
      }
      if (slot == key) {
        return false;
      }
      i = (i + 1) & mask;
    }
  }

  boolean contains(long key) {
    if (key == 0) {
      return hasZero;
    }
    int i = index(key);
    while (true) {
      long slot = slots[i];
      if (slot == 0) {
        return false;
      }
      if (slot == key) {
        return true;
      }
      i = (i + 1) & mask;
    }
  }

  int size() {
    return size + (hasZero ? 1 : 0);
  }

  /** Bytes of the table in memory (what the executor holds for this window). */
  long memoryBytes() {
    return 8L * slots.length;
  }

  /** The keys, in no particular order. */
  long[] toArray() {
    long[] out = new long[size()];
    int n = 0;
    for (long slot : slots) {
      if (slot != 0) {
        out[n++] = slot;
      }
    }
    if (hasZero) {
      out[n] = 0;
    }
    return out;
  }

  private int index(long key) {
    // The keys are xxhash64 values already; one more mix spreads keys that differ only in
    // their high bits (Murmur3's finalizer).
    long h = key;
    h ^= h >>> 33;
    h *= 0xff51afd7ed558ccdL;
    h ^= h >>> 33;
    return (int) h & mask;
  }

  private void grow() {
    long[] old = slots;
    slots = new long[old.length * 2];
    mask = slots.length - 1;
    for (long key : old) {
      if (key != 0) {
        int i = index(key);
        while (slots[i] != 0) {
          i = (i + 1) & mask;
        }
        slots[i] = key;
      }
    }
  }
}
