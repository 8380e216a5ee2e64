/*
 * Flink CEP as a contender of `cogra bench`: the two-step way (every match built by
 * Flink's NFA, then aggregated), in a local mini-cluster at parallelism 1.
 *
 * A long-lived process: it answers one JSON request per stdin line with one line on
 * stdout that starts with "COGRA ", so that the JVM's start is paid (and reported) once,
 * apart from the jobs.  A request names a file of events the Python side wrote (columns,
 * little-endian: int64 time, int64 key, int32 plays, then float64 attributes, one column
 * after another) and the pattern: a sequence of variables, each once or Kleene plus, with
 * the contiguity of cogra's semantics (docs/language.md, Event matching semantics):
 *
 *   skip-till-any-match  oneOrMore().allowCombinations(), followedByAny
 *   contiguous           oneOrMore().consecutive(),      next
 *   skip-till-next-match oneOrMore(),                    followedBy   (not Def. 6: see
 *                        cogra/bench/flink.py, which refuses it for the plots)
 *
 * Which variables an event may play (its type and local predicates) is decided by the
 * caller and passed as bits; events that play none are filtered out before the pattern,
 * as cogra's sub-streams leave them out.  Predicates on adjacent events are small
 * postfix programs over the previous and the current event's attributes.  Events of one
 * timestamp are never adjacent in a trend (docs/language.md, Events): every step requires a
 * later time than the match's last event.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.Accumulator;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.cep.CEP;
import org.apache.flink.cep.functions.PatternProcessFunction;
import org.apache.flink.cep.nfa.aftermatch.AfterMatchSkipStrategy;
import org.apache.flink.cep.pattern.Pattern;
import org.apache.flink.cep.pattern.conditions.IterativeCondition;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;

public final class CograFlinkCep {

    /** One event: a POJO, so that Flink serializes it without Kryo. */
    public static final class Ev implements Serializable {
        public long time;
        public long key;
        public int plays;
        public double[] a;

        public Ev() {}
    }

    /** A predicate on adjacent events: postfix tokens over prev/cur attributes. */
    static final class Program implements Serializable {
        final String[] ops;
        final double[] values;

        Program(JsonNode tokens) {
            ops = new String[tokens.size()];
            values = new double[tokens.size()];
            for (int i = 0; i < tokens.size(); i++) {
                JsonNode t = tokens.get(i);
                ops[i] = t.get(0).asText();
                values[i] = t.size() > 1 ? t.get(1).asDouble() : 0.0;
            }
        }

        boolean holds(Ev prev, Ev cur) {
            double[] stack = new double[ops.length];
            int n = 0;
            for (int i = 0; i < ops.length; i++) {
                String op = ops[i];
                switch (op) {
                    case "prev": stack[n++] = prev.a[(int) values[i]]; break;
                    case "cur": stack[n++] = cur.a[(int) values[i]]; break;
                    case "lit": stack[n++] = values[i]; break;
                    case "neg": stack[n - 1] = -stack[n - 1]; break;
                    case "not": stack[n - 1] = stack[n - 1] != 0 ? 0 : 1; break;
                    default: {
                        double b = stack[--n];
                        double x = stack[n - 1];
                        double r;
                        switch (op) {
                            case "+": r = x + b; break;
                            case "-": r = x - b; break;
                            case "*": r = x * b; break;
                            case "/": r = x / b; break;
                            case "<": r = x < b ? 1 : 0; break;
                            case "<=": r = x <= b ? 1 : 0; break;
                            case ">": r = x > b ? 1 : 0; break;
                            case ">=": r = x >= b ? 1 : 0; break;
                            case "=": r = x == b ? 1 : 0; break;
                            case "!=": r = x != b ? 1 : 0; break;
                            case "and": r = (x != 0 && b != 0) ? 1 : 0; break;
                            case "or": r = (x != 0 || b != 0) ? 1 : 0; break;
                            default: throw new IllegalArgumentException("unknown op " + op);
                        }
                        stack[n - 1] = r;
                    }
                }
            }
            return stack[0] != 0;
        }
    }

    /** May event {@code e} play variable {@code v} at this point of the match? */
    static final class Step extends IterativeCondition<Ev> {
        final int bit;
        final String name;
        final String before;
        final List<Program> self;
        final List<Program> fromBefore;

        Step(int v, String name, String before, List<Program> self, List<Program> fromBefore) {
            this.bit = 1 << v;
            this.name = name;
            this.before = before;
            this.self = self;
            this.fromBefore = fromBefore;
        }

        @Override
        public boolean filter(Ev e, Context<Ev> ctx) throws Exception {
            if ((e.plays & bit) == 0) {
                return false;
            }
            Ev last = last(ctx.getEventsForPattern(name));
            List<Program> preds = self;
            if (last == null && before != null) {
                last = last(ctx.getEventsForPattern(before));
                preds = fromBefore;
            }
            if (last == null) {
                return true;
            }
            if (e.time <= last.time) {
                return false;
            }
            for (Program p : preds) {
                if (!p.holds(last, e)) {
                    return false;
                }
            }
            return true;
        }

        private static Ev last(Iterable<Ev> events) {
            Ev out = null;
            for (Ev x : events) {
                out = x;
            }
            return out;
        }
    }

    /** Per key: [matches, then per aggregate: sum, count, min, max]. */
    public static final class Groups implements Accumulator<double[], HashMap<Long, double[]>> {
        private HashMap<Long, double[]> groups = new HashMap<>();

        @Override
        public void add(double[] row) {
            long key = (long) row[0];
            double[] acc = groups.get(key);
            if (acc == null) {
                acc = new double[row.length - 1];
                for (int i = 1; i + 3 < acc.length + 1; i += 4) {
                    acc[i + 2] = Double.POSITIVE_INFINITY;
                    acc[i + 3] = Double.NEGATIVE_INFINITY;
                }
                groups.put(key, acc);
            }
            combine(acc, row, 1);
        }

        static void combine(double[] acc, double[] row, int offset) {
            acc[0] += row[offset];
            for (int i = 1; i + 3 < acc.length + 1 && i + offset + 3 < row.length + 1; i += 4) {
                acc[i] += row[i + offset];
                acc[i + 1] += row[i + 1 + offset];
                acc[i + 2] = Math.min(acc[i + 2], row[i + 2 + offset]);
                acc[i + 3] = Math.max(acc[i + 3], row[i + 3 + offset]);
            }
        }

        @Override
        public HashMap<Long, double[]> getLocalValue() {
            return groups;
        }

        @Override
        public void resetLocal() {
            groups = new HashMap<>();
        }

        @Override
        public void merge(Accumulator<double[], HashMap<Long, double[]>> other) {
            for (Map.Entry<Long, double[]> en : other.getLocalValue().entrySet()) {
                double[] mine = groups.get(en.getKey());
                if (mine == null) {
                    groups.put(en.getKey(), en.getValue().clone());
                } else {
                    combine(mine, en.getValue(), 0);
                }
            }
        }

        @Override
        public Groups clone() {
            Groups g = new Groups();
            for (Map.Entry<Long, double[]> en : groups.entrySet()) {
                g.groups.put(en.getKey(), en.getValue().clone());
            }
            return g;
        }
    }

    /** Each match as one row: [key, 1, then per aggregate: sum, count, min, max]. */
    static final class Aggregate extends PatternProcessFunction<Ev, double[]> {
        final String[] names;
        final int[] var;
        final int[] attr;

        Aggregate(String[] names, int[] var, int[] attr) {
            this.names = names;
            this.var = var;
            this.attr = attr;
        }

        @Override
        public void processMatch(Map<String, List<Ev>> match, Context ctx, Collector<double[]> out) {
            double[] row = new double[2 + 4 * var.length];
            long key = 0;
            for (List<Ev> evs : match.values()) {
                key = evs.get(0).key;
                break;
            }
            row[0] = key;
            row[1] = 1;
            for (int k = 0; k < var.length; k++) {
                double sum = 0, n = 0, min = Double.POSITIVE_INFINITY, max = Double.NEGATIVE_INFINITY;
                if (var[k] >= 0) {
                    List<Ev> evs = match.get(names[var[k]]);
                    if (evs != null) {
                        for (Ev e : evs) {
                            n += 1;
                            if (attr[k] >= 0) {
                                double x = e.a[attr[k]];
                                sum += x;
                                min = Math.min(min, x);
                                max = Math.max(max, x);
                            }
                        }
                    }
                }
                row[2 + 4 * k] = sum;
                row[3 + 4 * k] = n;
                row[4 + 4 * k] = min;
                row[5 + 4 * k] = max;
            }
            out.collect(row);
        }
    }

    /** Sums the match rows per key into the job's accumulator (the CEP operator's own
     *  context has none); chained to it, so rows pass as objects. */
    static final class Collect extends ProcessFunction<double[], Long> {
        private transient Groups groups;

        @Override
        public void open(OpenContext context) {
            groups = new Groups();
            getRuntimeContext().addAccumulator("groups", groups);
        }

        @Override
        public void processElement(double[] row, Context ctx, Collector<Long> out) {
            groups.add(row);
        }
    }

    static List<Ev> read(String path, int n, int attrs) throws Exception {
        ByteBuffer buf;
        try (FileChannel ch = FileChannel.open(Path.of(path), StandardOpenOption.READ)) {
            buf = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size()).order(ByteOrder.LITTLE_ENDIAN);
        }
        List<Ev> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            Ev e = new Ev();
            e.time = buf.getLong(8 * i);
            e.key = buf.getLong(8 * n + 8 * i);
            e.plays = buf.getInt(16 * n + 4 * i);
            e.a = new double[attrs];
            for (int k = 0; k < attrs; k++) {
                e.a[k] = buf.getDouble(20 * n + 8 * (k * n + i));
            }
            out.add(e);
        }
        return out;
    }

    static Pattern<Ev, Ev> pattern(JsonNode req) {
        String semantics = req.get("semantics").asText();
        JsonNode vars = req.get("variables");
        Pattern<Ev, Ev> p = null;
        String before = null;
        for (int v = 0; v < vars.size(); v++) {
            JsonNode var = vars.get(v);
            String name = var.get("name").asText();
            List<Program> self = new ArrayList<>();
            List<Program> fromBefore = new ArrayList<>();
            for (JsonNode pred : var.get("self")) {
                self.add(new Program(pred));
            }
            for (JsonNode pred : var.get("from_before")) {
                fromBefore.add(new Program(pred));
            }
            if (p == null) {
                p = Pattern.<Ev>begin(name, AfterMatchSkipStrategy.noSkip());
            } else if (semantics.equals("any")) {
                p = p.followedByAny(name);
            } else if (semantics.equals("contiguous")) {
                p = p.next(name);
            } else {
                p = p.followedBy(name);
            }
            p = p.where(new Step(v, name, before, self, fromBefore));
            if (var.get("kleene").asBoolean()) {
                p = p.oneOrMore();
                if (semantics.equals("any")) {
                    p = p.allowCombinations();
                } else if (semantics.equals("contiguous")) {
                    p = p.consecutive();
                }
            }
            before = name;
        }
        return p;
    }

    static ObjectNode run(ObjectMapper json, JsonNode req) throws Exception {
        int n = req.get("n").asInt();
        List<Ev> events = read(req.get("events").asText(), n, req.get("attributes").asInt());
        JsonNode vars = req.get("variables");
        String[] names = new String[vars.size()];
        for (int v = 0; v < names.length; v++) {
            names[v] = vars.get(v).get("name").asText();
        }
        JsonNode aggs = req.get("aggregates");
        int[] var = new int[aggs.size()];
        int[] attr = new int[aggs.size()];
        for (int k = 0; k < var.length; k++) {
            var[k] = aggs.get(k).get(0).asInt();
            attr[k] = aggs.get(k).get(1).asInt();
        }
        long t0 = System.nanoTime();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        DataStream<Ev> stream = env.fromData(events)
            .assignTimestampsAndWatermarks(
                WatermarkStrategy.<Ev>forMonotonousTimestamps().withTimestampAssigner((e, ts) -> e.time))
            .filter(e -> e.plays != 0);
        CEP.pattern(stream.keyBy(e -> e.key), pattern(req))
            .inEventTime()
            .process(new Aggregate(names, var, attr))
            .process(new Collect())
            .sinkTo(new org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink<>());
        JobExecutionResult result = env.execute("cogra bench: Flink CEP");
        double seconds = (System.nanoTime() - t0) / 1e9;
        HashMap<Long, double[]> groups = result.getAccumulatorResult("groups");
        ObjectNode reply = json.createObjectNode();
        reply.put("job_s", seconds);
        ObjectNode rows = reply.putObject("groups");
        if (groups != null) {
            for (Map.Entry<Long, double[]> en : groups.entrySet()) {
                ArrayNode a = rows.putArray(Long.toString(en.getKey()));
                for (double x : en.getValue()) {
                    a.add(x);
                }
            }
        }
        return reply;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("COGRA {\"ready\": true}");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode reply;
            try {
                reply = run(json, json.readTree(line));
            } catch (Throwable err) {
                reply = json.createObjectNode();
                Throwable root = err;
                while (root.getCause() != null) {
                    root = root.getCause();
                }
                reply.put("error", err + " (cause: " + root + ")");
            }
            System.out.println("COGRA " + json.writeValueAsString(reply));
            System.out.flush();
        }
    }
}
