package org.apache.spark.sql.cogra

import java.nio.charset.StandardCharsets
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{ExprId, Expression, PythonUDF}
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkExec
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo

/**
 * A streaming MATCH_TREND's state belongs to the query that wrote it: this check stores the
 * query's identity (`cogra.analysis.identity`: its clauses, columns and PARTITION BY) in the
 * checkpoint, `<checkpoint>/cogra/match_trend-<operator>.json`, and compares it when the
 * stream continues from that checkpoint. A changed query fails before its first micro-batch
 * runs, naming each changed clause and the checkpoint; a stream restarted with the same
 * query, or another watermark delay, continues.
 *
 * It runs in `StreamPreparation`, on each micro-batch's physical plan on the driver, after
 * Spark's incremental planner has given every stateful operator its state location
 * (`StatefulOperatorStateInfo`), and before any task starts.
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

  /** Checks every MATCH_TREND stateful operator of a micro-batch's physical plan. */
  def checkPlan(session: SparkSession, plan: SparkPlan): Unit = if (!identities.isEmpty) {
    plan.foreach {
      case t: TransformWithStateInPySparkExec => checkOperator(session, t.functionExpr, t.stateInfo)
      case _ =>
    }
  }

  private def checkOperator(session: SparkSession, function: Expression,
      stateInfo: Option[StatefulOperatorStateInfo]): Unit = (function, stateInfo) match {
    case (u: PythonUDF, Some(info)) if identities.containsKey(u.resultId) =>
      check(session, info, identities.get(u.resultId))
    case _ =>
  }

  private def check(session: SparkSession, info: StatefulOperatorStateInfo, identity: String): Unit = {
    // EXPLAIN of a streaming query plans with an unknown location: nothing to compare.
    val state = new Path(info.checkpointLocation)
    if (info.checkpointLocation.contains("<unknown>") || state.getName != "state") return
    if (!checked.add((info.queryRunId.toString, info.operatorId))) return
    val file = new Path(new Path(state.getParent, Directory), s"match_trend-${info.operatorId}.json")
    val fs = file.getFileSystem(session.sessionState.newHadoopConf())
    // A checkpoint without a committed micro-batch holds no state yet: any query may take it.
    val commits = new Path(state.getParent, "commits")
    val committed = fs.exists(commits) && fs.listStatus(commits).exists(_.getPath.getName.forall(_.isDigit))
    if (!fs.exists(file) || !committed) {
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
