import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;

/** Reads keys ("s:<string>" or "i:<int>") and prints Flink's key group and operator index. */
public class KeyGroupVectors {
    public static void main(String[] args) throws Exception {
        int maxParallelism = Integer.parseInt(args[0]);
        int parallelism = Integer.parseInt(args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            Object key = line.startsWith("i:") ? (Object) Integer.valueOf(line.substring(2)) : line.substring(2);
            int keyGroup = KeyGroupRangeAssignment.assignToKeyGroup(key, maxParallelism);
            int operator = KeyGroupRangeAssignment.assignKeyToParallelOperator(key, maxParallelism, parallelism);
            out.append(keyGroup).append(' ').append(operator).append('\n');
        }
        System.out.print(out);
    }
}
