package dev.uatu.fs;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * Hadoop's checksummed local {@code AbstractFileSystem} ({@code fs.AbstractFileSystem.file.impl},
 * what a {@code FileContext} of {@code file:} paths uses: Spark's streaming checkpoints, Delta's
 * log) over {@link NioRawLocalFileSystem}, as Hadoop's {@code LocalFs} is over its raw one.
 */
public class NioLocalFs extends ChecksumFs {
  /** The constructor Hadoop calls (AbstractFileSystem.createFileSystem). */
  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** Hadoop's {@code RawLocalFs}, whose constructors are not public, over the nio raw one. */
  static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port in a file: URI
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // as Hadoop's RawLocalFs: every local name is valid
    }
  }
}
