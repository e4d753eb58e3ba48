// Reference codecs on the JVM, configured as Kafka 3.8 configures them (GzipCompression,
// SnappyCompression, ZstdCompression), for tests/test_compression.py.  Uses the JDK's gzip
// streams, snappy-java, zstd-jni and lz4-java (the jars pyspark ships).
//
// stdin: requests [u8 op][u8 codec][i32 length][payload]; stdout: [i32 status][i32 length][payload]
// op: 'e' encode as Kafka writes (its default level, one write), 'l' the same at a level and in
// pieces as the producer writes records (payload: [i32 level][i32 piece size][data]; level -1:
// the default), 'd' decode with the JVM reader, 'b' lz4-java fast compressor on one block.
// codec: 1 gzip, 2 snappy, 3 lz4 (decode: lz4-java's LZ4FrameInputStream), 4 zstd.
// status 0 = ok, 1 = the reader threw (payload: the exception text).

import com.github.luben.zstd.RecyclingBufferPool;
import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import com.github.luben.zstd.ZstdOutputStreamNoFinalizer;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import net.jpountz.lz4.LZ4Compressor;
import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;
import org.xerial.snappy.SnappyOutputStream;

public class CodecOracle {
    static byte[] encode(int codec, byte[] data, int level, int piece) throws Exception {
        ByteArrayOutputStream sink = new ByteArrayOutputStream();
        OutputStream out;
        switch (codec) {
            case 1:  // 8 KiB deflater buffer at the level (default 6), behind a 16 KiB buffered stream
                out = new BufferedOutputStream(new GZIPOutputStream(sink, 8 * 1024) {
                    { def.setLevel(level); }
                }, 16 * 1024);
                break;
            case 2:
                out = new SnappyOutputStream(sink);
                break;
            case 4:  // zstd-jni's stream at the level (default 3), behind a 16 KiB buffered stream
                out = new BufferedOutputStream(new ZstdOutputStreamNoFinalizer(
                    sink, RecyclingBufferPool.INSTANCE, level == -1 ? 3 : level), 16 * 1024);
                break;
            default:
                throw new IllegalArgumentException("codec " + codec);
        }
        for (int at = 0; at < data.length; at += piece) {
            out.write(data, at, Math.min(piece, data.length - at));
        }
        out.close();
        return sink.toByteArray();
    }

    static byte[] decode(int codec, byte[] data) throws Exception {
        InputStream source = new ByteArrayInputStream(data);
        InputStream in;
        switch (codec) {
            case 1: in = new GZIPInputStream(source, 16 * 1024); break;
            case 2: in = new SnappyInputStream(source); break;
            case 3: in = new LZ4FrameInputStream(source); break;
            case 4: in = new ZstdInputStreamNoFinalizer(source, RecyclingBufferPool.INSTANCE); break;
            default: throw new IllegalArgumentException("codec " + codec);
        }
        return in.readAllBytes();
    }

    public static void main(String[] args) throws Exception {
        DataInputStream in = new DataInputStream(System.in);
        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(System.out));
        LZ4Compressor fast = LZ4Factory.fastestInstance().fastCompressor();
        while (true) {
            int op;
            try {
                op = in.readUnsignedByte();
            } catch (EOFException end) {
                break;
            }
            int codec = in.readUnsignedByte();
            byte[] data = new byte[in.readInt()];
            in.readFully(data);
            byte[] result;
            int status = 0;
            try {
                if (op == 'e') {
                    result = encode(codec, data, -1, Math.max(1, data.length));
                } else if (op == 'l') {
                    ByteBuffer header = ByteBuffer.wrap(data);
                    int level = header.getInt(), piece = header.getInt();
                    result = encode(codec, Arrays.copyOfRange(data, 8, data.length), level, piece);
                } else if (op == 'd') {
                    result = decode(codec, data);
                } else {
                    byte[] block = new byte[fast.maxCompressedLength(data.length)];
                    result = Arrays.copyOf(block, fast.compress(data, 0, data.length, block, 0));
                }
            } catch (Exception e) {
                status = 1;
                result = e.toString().getBytes(StandardCharsets.UTF_8);
            }
            out.writeInt(status);
            out.writeInt(result.length);
            out.write(result);
        }
        out.flush();
    }
}
