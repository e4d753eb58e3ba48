// Kafka's own SimpleMemoryPool (kafka-clients) answering a script, for tests/test_pool.py.
//
// stdin, one command a line:
//   pool SIZE MAX STRICT   a new pool (the previous one and its buffers are dropped)
//                          -> "ok", or "error" when the constructor throws
//   alloc N                tryAllocate(N) -> "granted|refused|error AVAILABLE OOM"
//   release R              release the (R mod held)-th buffer still held (in grant order)
//                          -> "ok|none AVAILABLE OOM" ("none": nothing is held)
//   sync                   flush the answers so far
// AVAILABLE is availableMemory(), OOM is isOutOfMemory() (true/false), both read after the call.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.memory.SimpleMemoryPool;

public class PoolOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        PrintWriter out = new PrintWriter(System.out, false);
        SimpleMemoryPool pool = null;
        List<ByteBuffer> held = new ArrayList<>();
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            String verdict;
            switch (words[0]) {
                case "sync":
                    out.flush();
                    continue;
                case "pool":
                    held.clear();
                    try {
                        pool = new SimpleMemoryPool(Long.parseLong(words[1]),
                            Integer.parseInt(words[2]), Boolean.parseBoolean(words[3]), null);
                        out.println("ok");
                    } catch (IllegalArgumentException e) {
                        pool = null;
                        out.println("error");
                    }
                    continue;
                case "alloc":
                    try {
                        ByteBuffer buffer = pool.tryAllocate(Integer.parseInt(words[1]));
                        if (buffer == null) {
                            verdict = "refused";
                        } else {
                            held.add(buffer);
                            verdict = "granted";
                        }
                    } catch (IllegalArgumentException e) {
                        verdict = "error";
                    }
                    break;
                case "release":
                    if (held.isEmpty()) {
                        verdict = "none";
                    } else {
                        pool.release(held.remove((int) (Long.parseLong(words[1]) % held.size())));
                        verdict = "ok";
                    }
                    break;
                default:
                    throw new IllegalArgumentException("unknown command: " + line);
            }
            out.println(verdict + " " + pool.availableMemory() + " " + pool.isOutOfMemory());
        }
        out.flush();
    }
}
