// The wire types of src/types.ts against the server's OpenAPI document
// (docs/openapi.json of the repository): every schema is modelled, with the
// same property names, the same required-ness and the same nullability, and
// every string enum has the same values. And the Client against its routes:
// every route has a method, every query parameter a field of the method's
// query type, and every method a typed answer. No server needed.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { PKG_DIR } from "./harness.js";
import { Client, ERROR_CLASSES } from "../src/index.js";

type Schema = Record<string, any>;
// TETHER_OPENAPI_PATH checks against another copy (e.g. a server's live /openapi.json).
const doc = JSON.parse(readFileSync(process.env.TETHER_OPENAPI_PATH || join(PKG_DIR, "../../docs/openapi.json"), "utf8"));
const schemas: Record<string, Schema> = doc.components.schemas;

/** TS names that differ from the document's schema names. */
const RENAMED: Record<string, string> = { ErrorBody: "Error" };
/** Schemas with nothing to model as an interface or a string union. */
const NOT_MODELLED = new Set(["Name"]);
/** Types of routes newer than the committed document: compared as soon as it has them. */
const AHEAD = new Set<string>();

interface Prop {
  optional: boolean;
  nullable: boolean;
}
interface Iface {
  props: Map<string, Prop>;
  extends: string[];
}

const source = ts.createSourceFile("types.ts", readFileSync(join(PKG_DIR, "src/types.ts"), "utf8"), ts.ScriptTarget.ES2022, true);
const interfaces = new Map<string, Iface>();
const unions = new Map<string, string[] | null>();

function typeIsNullable(t: ts.TypeNode | undefined): boolean {
  if (!t) return true;
  if (ts.isUnionTypeNode(t)) return t.types.some(typeIsNullable);
  if (ts.isLiteralTypeNode(t)) return t.literal.kind === ts.SyntaxKind.NullKeyword;
  if (ts.isTypeReferenceNode(t)) return t.typeName.getText(source) === "Json";
  return t.kind === ts.SyntaxKind.UnknownKeyword || t.kind === ts.SyntaxKind.AnyKeyword;
}

for (const st of source.statements) {
  if (ts.isInterfaceDeclaration(st)) {
    const props = new Map<string, Prop>();
    for (const m of st.members) {
      if (ts.isPropertySignature(m)) {
        props.set(m.name.getText(source), { optional: !!m.questionToken, nullable: typeIsNullable(m.type) });
      }
    }
    const ext = (st.heritageClauses ?? []).flatMap((h) => h.types.map((t) => t.expression.getText(source)));
    interfaces.set(st.name.text, { props, extends: ext });
  } else if (ts.isTypeAliasDeclaration(st)) {
    const t = st.type;
    if (ts.isUnionTypeNode(t) && t.types.every((x) => ts.isLiteralTypeNode(x) && ts.isStringLiteral(x.literal))) {
      unions.set(st.name.text, t.types.map((x) => ((x as ts.LiteralTypeNode).literal as ts.StringLiteral).text));
    } else {
      unions.set(st.name.text, null);
    }
  }
}

function deref(s: Schema): Schema {
  if (s.$ref) return schemas[s.$ref.replace("#/components/schemas/", "")]!;
  return s;
}

function schemaNullable(s: Schema): boolean {
  if (Array.isArray(s.type)) return s.type.includes("null");
  if (s.type === "null") return true;
  for (const k of ["oneOf", "anyOf"]) if (Array.isArray(s[k])) return s[k].some((x: Schema) => schemaNullable(deref(x)));
  if (s.$ref) return schemaNullable(deref(s));
  // No type at all: any JSON, null included.
  return s.type === undefined && !s.allOf && !s.enum && !s.properties;
}

/** Properties of an object schema (allOf merged): name → {required, nullable}. */
function schemaProps(s: Schema): Map<string, { required: boolean; nullable: boolean }> {
  const out = new Map<string, { required: boolean; nullable: boolean }>();
  const parts = s.allOf ? s.allOf.map(deref) : [s];
  for (const p of parts) {
    const req = new Set<string>(p.required ?? []);
    for (const [k, v] of Object.entries<Schema>(p.properties ?? {})) out.set(k, { required: req.has(k), nullable: schemaNullable(v) });
  }
  return out;
}

function ifaceProps(name: string): Map<string, Prop> {
  const i = interfaces.get(name);
  assert.ok(i, `no interface ${name} in src/types.ts`);
  const out = new Map<string, Prop>();
  for (const e of i.extends) for (const [k, v] of ifaceProps(e)) out.set(k, v);
  for (const [k, v] of i.props) out.set(k, v);
  return out;
}

function compare(tsName: string, schema: Schema) {
  const want = schemaProps(schema);
  const have = ifaceProps(tsName);
  assert.deepEqual([...have.keys()].sort(), [...want.keys()].sort(), `${tsName}: property names differ from the document`);
  for (const [k, w] of want) {
    const h = have.get(k)!;
    assert.equal(!h.optional, w.required, `${tsName}.${k}: ${w.required ? "required" : "optional"} in the document`);
    assert.equal(h.nullable, w.nullable, `${tsName}.${k}: ${w.nullable ? "nullable" : "not nullable"} in the document`);
  }
}

test("the document parses and has schemas", () => {
  assert.ok(Object.keys(schemas).length > 30);
  assert.ok(interfaces.size > 30);
});

test("every interface matches its schema: property names, required-ness, nullability", (t) => {
  let checked = 0;
  for (const name of interfaces.keys()) {
    const schemaName = RENAMED[name] ?? name;
    const schema = schemas[schemaName];
    if (!schema && AHEAD.has(name)) {
      t.diagnostic(`${name} is not in the document yet`);
      continue;
    }
    assert.ok(schema, `interface ${name} has no schema ${schemaName} in the document`);
    compare(name, schema);
    checked++;
  }
  assert.ok(checked > 30, `only ${checked} interfaces checked`);
});

test("every schema of the document is modelled", () => {
  const modelled = new Set<string>([...interfaces.keys(), ...unions.keys()].map((n) => RENAMED[n] ?? n));
  const missing = Object.keys(schemas).filter((s) => !modelled.has(s) && !NOT_MODELLED.has(s));
  assert.deepEqual(missing, [], "schemas of the document without a TypeScript type");
});

test("string enums have the document's values", () => {
  let checked = 0;
  for (const [name, s] of Object.entries(schemas)) {
    if (!Array.isArray(s.enum) || s.type !== "string") continue;
    const values = unions.get(name);
    assert.ok(values, `enum ${name} is not a string union in src/types.ts`);
    assert.deepEqual([...values].sort(), [...s.enum].sort(), `enum ${name}`);
    checked++;
  }
  assert.ok(checked >= 5);
});

test("the batch answers are unions of their documented members", () => {
  for (const name of ["CompleteResult", "HeartbeatResult"]) {
    const members = (schemas[name]!.oneOf as Schema[]).map((m) => m.$ref.replace("#/components/schemas/", "")).sort();
    const decl = source.statements.find((s) => ts.isTypeAliasDeclaration(s) && s.name.text === name) as ts.TypeAliasDeclaration;
    assert.ok(decl && ts.isUnionTypeNode(decl.type), `${name} is a union`);
    const have = (decl.type as ts.UnionTypeNode).types.map((t) => t.getText(source)).sort();
    assert.deepEqual(have, members, name);
  }
});

test("one error class per documented error code", () => {
  assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), [...schemas.ErrorCode!.enum].sort());
});

test("GET /v1/whoami answers WhoamiResponse", () => {
  assert.equal(doc.paths["/v1/whoami"].get.responses["200"].content["application/json"].schema.$ref, "#/components/schemas/WhoamiResponse");
});

/** The Client method of each documented route. */
const ROUTES: Record<string, string> = {
  "GET /healthz": "health",
  "GET /readyz": "ready",
  "GET /metrics": "metrics",
  "GET /openapi.json": "openapi",
  "GET /v1/cron/preview": "cronPreview",
  "GET /v1/events": "streamEvents",
  "GET /v1/jobs": "list",
  "POST /v1/jobs": "enqueue",
  "POST /v1/jobs/batch": "enqueueBatch",
  "POST /v1/jobs/cancel": "cancelJobs",
  "POST /v1/jobs/replay": "replayJobs",
  "DELETE /v1/queues/{queue}": "deleteQueue",
  "GET /v1/queues/{queue}/throughput": "throughput",
  "GET /v1/workers": "workers",
  "PUT /v1/workers/{worker_id}": "announceWorker",
  "POST /v1/jobs/complete": "completeBatch",
  "POST /v1/jobs/heartbeat": "heartbeatBatch",
  "GET /v1/jobs/{id}": "get",
  "POST /v1/jobs/{id}/cancel": "cancel",
  "POST /v1/jobs/{id}/complete": "complete",
  "GET /v1/jobs/{id}/dependencies": "dependencies",
  "GET /v1/jobs/{id}/events": "events",
  "POST /v1/jobs/{id}/fail": "fail",
  "POST /v1/jobs/{id}/heartbeat": "heartbeat",
  "POST /v1/jobs/{id}/replay": "replay",
  "POST /v1/jobs/{id}/snooze": "snooze",
  "DELETE /v1/keys/{key_id}": "revokeKey",
  "GET /v1/queues": "queues",
  "GET /v1/queues/{queue}": "getQueue",
  "PATCH /v1/queues/{queue}": "configureQueue",
  "POST /v1/queues/{queue}/claim": "claim",
  "POST /v1/queues/{queue}/pause": "pause",
  "POST /v1/queues/{queue}/replay": "replayQueue",
  "POST /v1/queues/{queue}/resume": "resume",
  "GET /v1/schedules": "listSchedules",
  "POST /v1/schedules": "createSchedule",
  "GET /v1/schedules/{id}": "getSchedule",
  "DELETE /v1/schedules/{id}": "deleteSchedule",
  "PATCH /v1/schedules/{id}": "patchSchedule",
  "PUT /v1/schedules/{id}": "ensureSchedule",
  "GET /v1/schedules/{id}/runs": "scheduleRuns",
  "POST /v1/schedules/{id}/trigger": "triggerSchedule",
  "GET /v1/tenants": "listTenants",
  "POST /v1/tenants": "createTenant",
  "GET /v1/tenants/{tenant_id}/keys": "listKeys",
  "POST /v1/tenants/{tenant_id}/keys": "createKey",
  "POST /v1/tenants/{tenant_id}/suspend": "suspendTenant",
  "POST /v1/tenants/{tenant_id}/resume": "resumeTenant",
  "GET /v1/whoami": "whoami",
  "GET /v1/workflows": "listWorkflows",
  "GET /v1/workflows/{id}": "getWorkflow",
  "POST /v1/workflows/{id}/cancel": "cancelWorkflow",
  "POST /v1/workflows/{id}/retry": "retryWorkflow",
};
/** Routes the client has before the committed document does. */
const ROUTES_AHEAD = new Set<string>();

/**
 * For each route with query parameters: the type (in src/client.ts) of the method's query argument, and the
 * wire name of each of its fields that is not named as on the wire. `wait_ms` is the wait methods' own.
 */
const QUERIES: Record<string, { type: string; wire?: Record<string, string> }> = {
  "GET /v1/jobs": { type: "ListQuery" },
  "GET /v1/jobs/{id}/events": { type: "EventsQuery" },
  "GET /v1/workflows": { type: "WorkflowListQuery" },
  "GET /v1/cron/preview": { type: "CronPreviewQuery" },
  "GET /v1/schedules": { type: "ScheduleListQuery" },
  "GET /v1/queues/{queue}/throughput": { type: "ThroughputQuery" },
  "GET /v1/events": { type: "StreamFilter", wire: { jobId: "job_id", workflowId: "workflow_id", events: "event" } },
};
/** The routes whose `wait_ms` a method of its own uses, waiting until the thing has finished. */
const WAITS: Record<string, string> = { "GET /v1/jobs/{id}": "wait", "GET /v1/workflows/{id}": "waitWorkflow" };

const clientSource = ts.createSourceFile("client.ts", readFileSync(join(PKG_DIR, "src/client.ts"), "utf8"), ts.ScriptTarget.ES2022, true);

/** The property names of an interface of src/client.ts. */
function clientInterface(name: string): string[] {
  const decl = clientSource.statements.find((st): st is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(st) && st.name.text === name);
  assert.ok(decl, `no interface ${name} in src/client.ts`);
  return decl.members.filter(ts.isPropertySignature).map((m) => m.name.getText(clientSource));
}

test("every query parameter of the document is a field of its method's query type", () => {
  for (const [path, ops] of Object.entries<Record<string, any>>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(ops)) {
      const route = `${method.toUpperCase()} ${path}`;
      const params = ((op.parameters ?? []) as Schema[]).filter((p) => p.in === "query").map((p) => p.name as string);
      const waits = params.includes("wait_ms");
      if (waits) assert.equal(typeof (Client.prototype as unknown as Record<string, unknown>)[WAITS[route] ?? ""], "function", `${route}: wait_ms has no wait method`);
      const rest = params.filter((p) => p !== "wait_ms");
      if (rest.length === 0) {
        assert.ok(!QUERIES[route], `${route} has no query parameters but the table names ${QUERIES[route]?.type}`);
        continue;
      }
      const q = QUERIES[route];
      assert.ok(q, `${route} takes ${rest.join(", ")}: name its method's query type in this table`);
      const fields = clientInterface(q.type).map((f) => q.wire?.[f] ?? f);
      assert.deepEqual(fields.sort(), [...rest].sort(), `${route}: the fields of ${q.type}`);
    }
  }
});

test("every method of a route answers a type, never any or unknown", () => {
  const program = ts.createProgram([join(PKG_DIR, "src/index.ts")], { strict: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: ["node"] });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(join(PKG_DIR, "src/client.ts"))!;
  const cls = file.statements.find((st): st is ts.ClassDeclaration => ts.isClassDeclaration(st) && st.name?.text === "Client")!;
  const classType = checker.getTypeAtLocation(cls);
  for (const method of new Set(Object.values(ROUTES))) {
    const sym = classType.getProperty(method);
    assert.ok(sym, `Client.${method}`);
    const sig = checker.getSignaturesOfType(checker.getTypeOfSymbolAtLocation(sym, cls), ts.SignatureKind.Call)[0]!;
    const answer = checker.typeToString(checker.getReturnTypeOfSignature(sig));
    assert.match(answer, /^(Promise|AsyncGenerator)<.+>$/, `Client.${method} answers ${answer}`);
    assert.doesNotMatch(answer, /^\w+<(any|unknown)[,>]|\bany\b/, `Client.${method} answers ${answer}`);
  }
});

test("every documented route has a Client method", () => {
  const documented = Object.entries<Record<string, unknown>>(doc.paths).flatMap(([path, ops]) =>
    Object.keys(ops)
      .filter((m) => ["get", "post", "patch", "put", "delete"].includes(m))
      .map((m) => `${m.toUpperCase()} ${path}`),
  );
  const missing = documented.filter((r) => !ROUTES[r]);
  assert.deepEqual(missing, [], "documented routes without a Client method in this table");
  const gone = Object.keys(ROUTES).filter((r) => !documented.includes(r) && !ROUTES_AHEAD.has(r));
  assert.deepEqual(gone, [], "routes in this table that the document does not have");
  for (const [route, method] of Object.entries(ROUTES)) {
    assert.equal(typeof (Client.prototype as unknown as Record<string, unknown>)[method], "function", `${route}: Client.${method}`);
  }
});

test("every duration option of the SDK's own API (not the wire's) is in milliseconds and named …Ms", () => {
  let checked = 0;
  const offenders: string[] = [];
  for (const file of ["client.ts", "worker.ts", "task.ts", "handler.ts", "workflow.ts"]) {
    const sf = ts.createSourceFile(file, readFileSync(join(PKG_DIR, "src", file), "utf8"), ts.ScriptTarget.ES2022, true);
    const visit = (node: ts.Node) => {
      if (ts.isPropertySignature(node) && node.type) {
        const doc = ts
          .getJSDocCommentsAndTags(node)
          .map((d) => d.getText(sf))
          .join(" ");
        // A number documented in ms (or milliseconds) is a duration, and so is anything named like one.
        const isNumber = node.type.getText(sf).split("|").some((t) => t.trim() === "number");
        const name = node.name.getText(sf);
        if (isNumber && (/\bms\b|millisecond/i.test(doc) || /(timeout|delay|wait|grace|interval|ttl)/i.test(name))) {
          checked++;
          if (!/Ms$/.test(name)) offenders.push(`${file}: ${name}`);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  assert.deepEqual(offenders, [], "duration options not named …Ms");
  assert.ok(checked >= 10, `only ${checked} duration options found`);
});
