package org.apache.spark.sql.cogra

import java.nio.charset.StandardCharsets
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{ExprId, PythonUDF}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}
import org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkExec

/**
 * A streaming MATCH_TREND's state belongs to the query that wrote it: this check stores the
 * query's identity (`cogra.analysis.identity`: its clauses, columns and PARTITION BY) in the
 * checkpoint, `<checkpoint>/cogra/match_trend-<operator>.json`, and compares it when the
 * stream continues from that checkpoint. A changed query fails before its first micro-batch
 * runs, naming each changed clause and the checkpoint; a stream restarted with the same
 * query, or another watermark delay, continues.
 *
 * It runs as a columnar rule: Spark applies those while preparing each micro-batch's physical
 * plan on the driver, after its incremental planner has given every stateful operator its
 * state location (`StatefulOperatorStateInfo`), and before any task starts. A planner strategy
 * or optimizer rule would not see the checkpoint; a query listener could not stop the query.
 * The identity reaches the physical operator through its Python function's result id,
 * registered when `MatchTrend.planStream` builds the call.
 */
private[cogra] object CheckpointIdentity {
  val Directory = "cogra"
  private val mapper = new ObjectMapper()
  private val identities = new ConcurrentHashMap[ExprId, String]()
  /** (run id, operator id) already checked: once per stream run, not per micro-batch. */
  private val checked = ConcurrentHashMap.newKeySet[(String, Long)]()

  /** Remembers `identity` (JSON) for the operator whose function is `udf`, with the call's
   * PARTITION BY written into it. */
  def register(udf: PythonUDF, identity: String, partitionBy: Seq[String]): Unit = {
    val tree = mapper.readTree(identity).asInstanceOf[ObjectNode]
    tree.get("clauses").elements().asScala.foreach { c =>
      if (c.get("name").asText() == "PARTITION BY") {
        val keys = partitionBy.mkString(", ")
        c.asInstanceOf[ObjectNode].put("canonical", keys).put("text", keys)
      }
    }
    identities.put(udf.resultId, mapper.writeValueAsString(tree))
  }

  def rule(session: SparkSession): ColumnarRule = new ColumnarRule {
    override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
      override def apply(plan: SparkPlan): SparkPlan = {
        if (!identities.isEmpty) {
          plan.foreach {
            case t: TransformWithStateInPySparkExec if t.stateInfo.isDefined =>
              t.functionExpr match {
                case u: PythonUDF if identities.containsKey(u.resultId) =>
                  check(session, t, identities.get(u.resultId))
                case _ =>
              }
            case _ =>
          }
        }
        plan
      }
    }
  }

  private def check(session: SparkSession, op: TransformWithStateInPySparkExec, identity: String): Unit = {
    val info = op.stateInfo.get
    // EXPLAIN of a streaming query plans with an unknown location: nothing to compare.
    val state = new Path(info.checkpointLocation)
    if (info.checkpointLocation.contains("<unknown>") || state.getName != "state") return
    if (!checked.add((info.queryRunId.toString, info.operatorId))) return
    val file = new Path(new Path(state.getParent, Directory), s"match_trend-${info.operatorId}.json")
    val fs = file.getFileSystem(session.sessionState.newHadoopConf())
    if (!fs.exists(file)) {
      val out = fs.create(file, true)
      try out.write(identity.getBytes(StandardCharsets.UTF_8)) finally out.close()
      return
    }
    val in = fs.open(file)
    val stored = try new String(in.readAllBytes(), StandardCharsets.UTF_8) finally in.close()
    val changes = differences(stored, identity)
    if (changes.nonEmpty) {
      checked.remove((info.queryRunId.toString, info.operatorId))
      throw new CograCheckpointException(
        s"${MatchTrend.DisplayName}: the checkpoint ${state.getParent} holds the state of " +
          "another query, which this one cannot continue:\n  " + changes.mkString("\n  ") +
          "\nA checkpoint continues only the query that wrote it: start the changed query " +
          "with a new checkpointLocation (or restart the original query on this one).")
    }
  }

  /** One line per clause whose canonical form differs: `PATTERN: was `..`, now `..``. */
  private[cogra] def differences(stored: String, current: String): Seq[String] = {
    def clauses(json: String): Seq[(String, (String, String))] =
      mapper.readTree(json).get("clauses").elements().asScala.toSeq.map { c =>
        c.get("name").asText() -> (c.get("canonical").asText(), c.get("text").asText())
      }
    val old = clauses(stored).toMap
    val now = clauses(current)
    def shown(text: Option[String]): String = text match {
      case None => "(not recorded)"
      case Some("") => "(none)"
      case Some(t) => s"`$t`"
    }
    val changed = now.collect {
      case (name, (canonical, text)) if !old.get(name).exists(_._1 == canonical) =>
        s"$name: was ${shown(old.get(name).map(_._2))}, now ${shown(Some(text))}"
    }
    val dropped = old.keys.filterNot(now.map(_._1).toSet).toSeq.sorted.map { name =>
      s"$name: was ${shown(old.get(name).map(_._2))}, now (not recorded)"
    }
    changed ++ dropped
  }
}

/** A streaming MATCH_TREND restarted on a checkpoint that another query wrote. */
class CograCheckpointException(message: String) extends IllegalStateException(message)
