import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { RE2JS } from 're2js';
import { joinPointer, type MappingProblem } from './mapping';

/**
 * The JSON Schemas (draft 2020-12) of synthetic tools: checked against the meta-schema and
 * compiled when saved, compiled once per tool version when run. Ajv with `strict: false`
 * (annotations and unknown keywords are allowed, as the draft allows them); no schema is
 * ever fetched (`$ref` to anything outside the schema does not compile).
 */
const MAX_SCHEMA_BYTES = 64 * 1024;

/**
 * `pattern` and `patternProperties` run in RE2 (re2js: time linear in the input), not in
 * JavaScript's backtracking engine: a schema is written by any organization, and a pattern
 * such as `^(a+)+$` would otherwise hold the event loop (every tenant's requests) for hours on
 * a forty-character argument. RE2 has no lookaround or backreferences: a pattern using them
 * does not compile, so the schema is refused when saved.
 */
const linearRegExp = Object.assign((pattern: string, flags: string) => RE2JS.compile(pattern, flags.includes('i') ? RE2JS.CASE_INSENSITIVE : 0), {
  // What Ajv would write into standalone code (never generated here).
  code: 'require("re2js").RE2JS.compile',
});

function newAjv(useDefaults = true) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, useDefaults, validateFormats: true, code: { regExp: linearRegExp } });
  addFormats(ajv);
  return ajv;
}

const checker = newAjv();

/** Problems of a schema written at `at`: size, meta-schema, type object, compiles. */
export function schemaProblems(schema: unknown, at: string): MappingProblem[] {
  if (JSON.stringify(schema).length > MAX_SCHEMA_BYTES) return [{ pointer: at, message: 'is larger than 64 KiB' }];
  const declared = (schema as { $schema?: unknown }).$schema;
  if (declared !== undefined && declared !== 'https://json-schema.org/draft/2020-12/schema') {
    return [{ pointer: joinPointer(at, '$schema'), message: 'must be https://json-schema.org/draft/2020-12/schema (or left out): schemas are draft 2020-12' }];
  }
  let valid: boolean;
  try {
    valid = checker.validateSchema(schema as object) as boolean;
  } catch (err) {
    return [{ pointer: at, message: `is not a valid JSON Schema: ${err instanceof Error ? err.message : String(err)}` }];
  }
  if (!valid) {
    return (checker.errors ?? []).slice(0, 10).map((e) => ({ pointer: at + e.instancePath, message: `is not a valid JSON Schema: ${e.message ?? 'invalid'}` }));
  }
  if ((schema as { type?: unknown }).type !== 'object') return [{ pointer: joinPointer(at, 'type'), message: 'must be "object"' }];
  try {
    newAjv().compile(schema as object);
  } catch (err) {
    return [{ pointer: at, message: `does not compile: ${err instanceof Error ? err.message : String(err)}` }];
  }
  return [];
}

const compiled = new Map<string, ValidateFunction>();
const MAX_COMPILED = 500;

/**
 * The validator of a stored schema, compiled once per `key` (tool id, which schema, and its
 * version). `applyDefaults`: fill in the schema's defaults (arguments), or leave the value as
 * it is (the output).
 */
export function validatorFor(key: string, schema: object, applyDefaults = true): ValidateFunction {
  let validate = compiled.get(key);
  if (!validate) {
    validate = newAjv(applyDefaults).compile(schema);
    if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value as string);
    compiled.set(key, validate);
  }
  return validate;
}

/** Ajv's errors as problems under `base` (`/arguments`). */
export function problemsOf(errors: ErrorObject[] | null | undefined, base: string): MappingProblem[] {
  return (errors ?? []).map((e) => {
    const missing = e.keyword === 'required' ? joinPointer('', String((e.params as { missingProperty?: string }).missingProperty ?? '')) : '';
    return { pointer: base + e.instancePath + missing, message: e.message ?? 'is not valid' };
  });
}
