#!/usr/bin/env node
// Checks batchd's deployment files, as `make test` runs them
// (deploy/check_manifests.sh):
//
//   node validate.js --manifests RENDERED.yaml [--compose docker-compose.yml]
//                    [--daemon-flags FLAGS.txt]
//
// 1. Every object of RENDERED.yaml (the output of `kubectl kustomize
//    deploy/k8s`) validates against the Kubernetes OpenAPI schema of its
//    apiVersion and kind, with the models of the npm package
//    kubernetes-models (Kubernetes 1.27). Those schemas check types, enums
//    and required fields but accept unknown fields, which is how a typo
//    ("imagePulPolicy") slips through: every field name is therefore also
//    looked up in the models' type declarations.
// 2. With --daemon-flags (one flag name per line, from `batchd --help`):
//    every flag that a manifest or the compose file passes to the daemon
//    exists.
//
// Prints one line per object and exits 1 listing every problem found.
"use strict";

const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, "");
    if (!["manifests", "compose", "daemon-flags"].includes(name) ||
        i + 1 >= argv.length) {
      console.error(`usage: validate.js --manifests FILE [--compose FILE] ` +
                    `[--daemon-flags FILE] (bad argument ${argv[i]})`);
      process.exit(2);
    }
    args[name] = argv[i + 1];
  }
  if (!args.manifests) {
    console.error("validate.js: --manifests is required");
    process.exit(2);
  }
  return args;
}

// "apps/v1" -> "kubernetes-models/apps/v1"; core "v1" -> "kubernetes-models/v1".
function modelModule(apiVersion) {
  return `kubernetes-models/${apiVersion}`;
}

// --- Field names from the models' TypeScript declarations ---------------

// A declaration file's model: its property names and types, and where the
// types it names are declared.
const declarations = new Map();
function readDeclaration(file) {
  if (declarations.has(file)) return declarations.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g)) {
    // Package imports ("@kubernetes-models/apimachinery/...") name files
    // under node_modules; the packages' exports maps do not list .d.ts.
    const target = m[2].startsWith(".")
      ? path.resolve(path.dirname(file), m[2])
      : path.join(__dirname, "node_modules", m[2]);
    for (const name of m[1].split(",")) imports.set(name.trim(), `${target}.d.ts`);
  }
  // The first interface declared is the model's own; a top-level kind's
  // extends TypeMeta (apiVersion, kind).
  const body =
    /export interface \w+( extends TypeMeta)? \{([\s\S]*?)\n\}/.exec(text);
  const props = new Map();
  if (body && body[1]) {
    props.set("apiVersion", "string");
    props.set("kind", "string");
  }
  if (body) {
    // Properties start at four spaces of indent; a map's type spans lines.
    const fields = body[2].replace(/\/\*\*[\s\S]*?\*\//g, "")
      .split(/\n(?= {4}")/);
    for (const field of fields) {
      const m = /^\s*"([^"]+)"\??: ([\s\S]+);\s*$/.exec(field);
      if (m) props.set(m[1], m[2].replace(/\s+/g, " "));
    }
  }
  const declaration = { props, imports };
  declarations.set(file, declaration);
  return declaration;
}

// The declaration file of the model `type` refers to, or null for scalars,
// maps of scalars and types without a model (IntOrString, Quantity...).
function modelOf(type, declaration) {
  const name = /^(?:Array<)?(I[A-Za-z0-9]+)>?$/.exec(type.trim());
  if (!name || !declaration.imports.has(name[1])) return null;
  const file = declaration.imports.get(name[1]);
  return fs.existsSync(file) ? file : null;
}

// Appends to `problems` every field of `value` that its model lacks.
function checkFields(value, file, where, problems) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return;
  }
  const declaration = readDeclaration(file);
  if (declaration.props.size === 0) return;  // a type without fields listed
  for (const [key, child] of Object.entries(value)) {
    const type = declaration.props.get(key);
    if (type === undefined) {
      problems.push(`${where}.${key}: unknown field`);
      continue;
    }
    // A map of models: { [key: string]: IFoo }.
    const map = /^\{\s*\[key: string\]: (\w+);?\s*\}$/.exec(type);
    if (map) {
      const mapped = modelOf(map[1], declaration);
      if (mapped && child && typeof child === "object") {
        for (const [k, v] of Object.entries(child)) {
          checkFields(v, mapped, `${where}.${key}[${k}]`, problems);
        }
      }
      continue;
    }
    const model = modelOf(type, declaration);
    if (!model) continue;
    if (Array.isArray(child)) {
      child.forEach((item, i) =>
        checkFields(item, model, `${where}.${key}[${i}]`, problems));
    } else {
      checkFields(child, model, `${where}.${key}`, problems);
    }
  }
}

// --- Objects -------------------------------------------------------------

function validateObject(object, problems) {
  const { apiVersion, kind } = object;
  const name = `${kind}/${object.metadata && object.metadata.name}`;
  let Model;
  try {
    Model = require(modelModule(apiVersion))[kind];
  } catch (error) {
    Model = undefined;
  }
  if (typeof Model !== "function") {
    problems.push(`${name}: no schema for apiVersion ${apiVersion} kind ${kind}`);
    return;
  }
  const before = problems.length;
  try {
    new Model(object).validate();
  } catch (error) {
    problems.push(`${name}: ${error.message}`);
  }
  const file = require.resolve(modelModule(apiVersion), { paths: [__dirname] })
    .replace(/index\.js$/, `${kind}.d.ts`);
  checkFields(object, file, name, problems);
  console.log(`${problems.length === before ? "ok     " : "INVALID"} ` +
              `${apiVersion} ${name}`);
}

// --- Daemon flags --------------------------------------------------------

// The image the daemon runs from: "batchd", "batchd:dev",
// "registry.example.com/batchd:1.0" (not batchd-trainer, batchd-prometheus).
function isDaemonImage(image) {
  const last = String(image || "").split("/").pop();
  return last.split(/[:@]/)[0] === "batchd";
}

// The daemon's flags in `argv`, '-' and '_' alike, as `batchd` reads them.
function flagNames(argv) {
  return argv.filter((a) => typeof a === "string" && a.startsWith("--"))
    .map((a) => a.slice(2).split("=")[0].replace(/-/g, "_"));
}

// [where, flag] for every flag passed to the daemon in `objects` (their
// containers run the image's ENTRYPOINT, batchd, unless a command
// replaces it) and in the compose file's services.
function daemonFlags(objects, compose) {
  const found = [];
  for (const object of objects) {
    const spec = object.spec || {};
    const pod = spec.template ? spec.template.spec
      : spec.jobTemplate ? spec.jobTemplate.spec.template.spec : null;
    if (!pod) continue;
    for (const c of [...(pod.initContainers || []), ...(pod.containers || [])]) {
      if (!isDaemonImage(c.image)) continue;
      const command = c.command || [];
      if (command.length && path.basename(command[0]) !== "batchd") continue;
      for (const flag of flagNames([...command.slice(1), ...(c.args || [])])) {
        found.push([`${object.kind}/${object.metadata.name} ${c.name}`, flag]);
      }
    }
  }
  for (const [service, s] of Object.entries((compose && compose.services) || {})) {
    if (!isDaemonImage(s.image) || s.entrypoint) continue;
    const command = typeof s.command === "string" ? s.command.split(/\s+/)
      : s.command || [];
    for (const flag of flagNames(command)) {
      found.push([`docker-compose.yml service ${service}`, flag]);
    }
  }
  return found;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const objects = yaml.loadAll(fs.readFileSync(args.manifests, "utf8"))
    .filter((o) => o !== null && o !== undefined);
  const problems = [];
  if (objects.length === 0) problems.push(`${args.manifests}: no objects`);
  for (const object of objects) validateObject(object, problems);

  if (args["daemon-flags"]) {
    const known = new Set(fs.readFileSync(args["daemon-flags"], "utf8")
      .split("\n").map((l) => l.trim().replace(/-/g, "_")).filter(Boolean));
    const compose = args.compose
      ? yaml.load(fs.readFileSync(args.compose, "utf8")) : null;
    const passed = daemonFlags(objects, compose);
    if (passed.length === 0) problems.push("no daemon flags found to check");
    for (const [where, flag] of passed) {
      if (!known.has(flag)) {
        problems.push(`${where}: batchd has no flag --${flag} (batchd --help)`);
      }
    }
    console.log(`daemon flags: ${passed.length} checked against ` +
                `${known.size} known to batchd`);
  }

  if (problems.length) {
    console.error(`${problems.length} problem(s):`);
    for (const p of problems) console.error(`  ${p}`);
    process.exit(1);
  }
  console.log(`all ${objects.length} objects valid`);
}

main();
