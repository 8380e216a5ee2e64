package org.apache.spark.sql.cogra

import java.io.ByteArrayOutputStream
import java.nio.charset.StandardCharsets
import java.util.concurrent.ConcurrentHashMap

import scala.sys.process._

import org.apache.spark.SparkEnv
import org.apache.spark.api.python.{PythonBroadcast, PythonFunction, SimplePythonFunction}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.errors.QueryCompilationErrors
import org.apache.spark.util.CollectionAccumulator

/**
 * The Python side of the shim: which interpreter runs the handler, and the pickled commands
 * Spark's Python workers load.
 *
 * A command is a tiny hand-written pickle (protocol 3) that refers to a function or class of
 * the installed `cogra` package by module and name, so nothing on the JVM side depends on the
 * Python code beyond these names.
 */
private[cogra] object PythonCommands {

  /** Pickle opcodes (see CPython's Lib/pickle.py). */
  private val PROTO: Byte = 0x80.toByte
  private val GLOBAL: Byte = 'c'
  private val BINUNICODE: Byte = 'X'
  private val BINBYTES: Byte = 'B'
  private val NONE: Byte = 'N'
  private val TUPLE: Byte = 't'
  private val MARK: Byte = '('
  private val TUPLE2: Byte = 0x86.toByte
  private val REDUCE: Byte = 'R'
  private val STOP: Byte = '.'

  sealed trait Arg
  final case class Str(value: String) extends Arg
  final case class Bytes(value: Array[Byte]) extends Arg

  private def writeGlobal(out: ByteArrayOutputStream, module: String, name: String): Unit = {
    out.write(GLOBAL.toInt)
    out.write(s"$module\n$name\n".getBytes(StandardCharsets.UTF_8))
  }

  private def writeLength(out: ByteArrayOutputStream, n: Int): Unit = {
    out.write(n & 0xff); out.write((n >>> 8) & 0xff)
    out.write((n >>> 16) & 0xff); out.write((n >>> 24) & 0xff)
  }

  private def writeArg(out: ByteArrayOutputStream, arg: Arg): Unit = arg match {
    case Str(s) =>
      val b = s.getBytes(StandardCharsets.UTF_8)
      out.write(BINUNICODE.toInt); writeLength(out, b.length); out.write(b)
    case Bytes(b) =>
      out.write(BINBYTES.toInt); writeLength(out, b.length); out.write(b)
  }

  /** `pickle.dumps(module.name)`: a class or function referred to by module and name. */
  def reference(module: String, name: String): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    out.write(PROTO.toInt); out.write(3)
    writeGlobal(out, module, name)
    out.write(STOP.toInt)
    out.toByteArray
  }

  /** Protocol 3, then `module.name(*args)` on the unpickler's stack. */
  private def writeCall(out: ByteArrayOutputStream, module: String, name: String, args: Seq[Arg]): Unit = {
    out.write(PROTO.toInt); out.write(3)
    writeGlobal(out, module, name)
    out.write(MARK.toInt)
    args.foreach(writeArg(out, _))
    out.write(TUPLE.toInt)
    out.write(REDUCE.toInt)
  }

  /** `pickle.dumps((module.name(*args), None))`: the (function, return type) pair of a UDF. */
  def udfCall(module: String, name: String, args: Seq[Arg]): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    writeCall(out, module, name, args)
    out.write(NONE.toInt)
    out.write(TUPLE2.toInt)
    out.write(STOP.toInt)
    out.toByteArray
  }

  /** `pickle.dumps(module.name(*args))`: whatever the call returns (a whole command). */
  def call(module: String, name: String, args: Seq[Arg]): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    writeCall(out, module, name, args)
    out.write(STOP.toInt)
    out.toByteArray
  }

  /** A JSON string literal. */
  def jsonString(s: String): String = {
    val sb = new StringBuilder("\"")
    s.foreach {
      case '"' => sb.append("\\\"")
      case '\\' => sb.append("\\\\")
      case c if c < ' ' => sb.append(f"\\u${c.toInt}%04x")
      case c => sb.append(c)
    }
    sb.append('"').toString
  }

  /**
   * The Python interpreter for the handler, as Spark picks one for Python UDFs:
   * `spark.pyspark.python`, else `PYSPARK_PYTHON`, else `python3`.
   */
  def pythonExec: String = {
    val fromConf = Option(SparkEnv.get).flatMap(_.conf.getOption("spark.pyspark.python"))
    fromConf.orElse(sys.env.get("PYSPARK_PYTHON")).filter(_.nonEmpty).getOrElse("python3")
  }

  private val versions = new ConcurrentHashMap[String, String]()

  /** "major.minor" of `exec`, asked once per interpreter (workers check it matches). */
  def pythonVersion(exec: String): String = {
    val known = versions.get(exec)
    if (known != null) return known
    val err = new StringBuilder
    val version = try {
      Seq(exec, "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
        .!!(ProcessLogger(_ => (), line => err.append(line).append('\n'))).trim
    } catch {
      case e: Exception =>
        throw QueryCompilationErrors.tableValuedFunctionFailedToAnalyseInPythonError(
          s"MATCH_TREND cannot run the Python interpreter '$exec' (${e.getMessage}) $err; " +
            "set spark.pyspark.python or PYSPARK_PYTHON to a Python that has cogra installed")
    }
    versions.putIfAbsent(exec, version)
    version
  }

  /**
   * A Python function for Spark's workers, with no broadcasts or includes; `accumulator`
   * collects what its tasks report (`Diagnostics`).
   * Its workers get the `spark.executorEnv.*` settings and `PYTHONHASHSEED`, exactly as
   * PySpark's own functions do (`SparkContext.environment`): in local mode that is the only
   * way settings reach a worker, and Spark keeps one Python daemon per environment, so the
   * same environment shares the executors' daemons -- those `cogra.spark.workers.prepare`
   * started, with cogra loaded -- instead of starting another one at the first query.
   */
  def function(
      command: Array[Byte],
      exec: String,
      accumulator: CollectionAccumulator[Array[Byte]] = null): PythonFunction = {
    val env = new java.util.HashMap[String, String]()
    Option(SparkEnv.get).foreach(_.conf.getExecutorEnv.foreach { case (k, v) => env.put(k, v) })
    env.put("PYTHONHASHSEED", sys.env.getOrElse("PYTHONHASHSEED", "0"))
    new SimplePythonFunction(
      command,
      env,
      new java.util.ArrayList[String](),
      exec,
      pythonVersion(exec),
      new java.util.ArrayList[Broadcast[PythonBroadcast]](),
      accumulator)
  }
}
