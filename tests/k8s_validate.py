#!/usr/bin/python3
"""tests/k8s_validate.py — checks deploy/k8s/*.yaml without a cluster, with what Debian 12 ships.

Schema: every object against the API models of Debian's python3-kubernetes (the official client, 22.6 = Kubernetes
1.22): each field must be one the model knows (a typo is an error, where kubectl would silently drop it with
--validate=false), of the model's type (str, int, bool, map, list, nested object), and the required fields must be
there (the models' own client-side validation). autoscaling/v2 is checked against v2beta2, its identical
predecessor (1.22 has no v2 model). Then what this deployment promises: probes on /health, the model volume
read-only, terminationGracePeriodSeconds above preStop + shutdown_grace_seconds, the scrape annotations on the port
aahd listens on, the autoscaler on a metric the adapter serves, the CUDA variant asking for nvidia.com/gpu and
otherwise equal to the CPU one. Prints one line per object; exits 1 on the first problem.
"""
import copy
import re
import sys

import kubernetes.client as k8s
import yaml

MODELS = {
    ('v1', 'ConfigMap'): 'V1ConfigMap',
    ('v1', 'Service'): 'V1Service',
    ('apps/v1', 'Deployment'): 'V1Deployment',
    ('autoscaling/v2', 'HorizontalPodAutoscaler'): 'V2beta2HorizontalPodAutoscaler',
}


class Invalid(Exception):
    pass


def build(type_name, value, where):
    """Checks value against the client's type name and returns the model object (or plain value)."""
    if value is None:
        return None
    if type_name == 'str':
        if not isinstance(value, str):
            raise Invalid(f'{where}: a string is required, not {value!r}')
        return value
    if type_name == 'int':
        if not isinstance(value, int) or isinstance(value, bool):
            raise Invalid(f'{where}: an integer is required, not {value!r}')
        return value
    if type_name == 'bool':
        if not isinstance(value, bool):
            raise Invalid(f'{where}: true or false is required, not {value!r}')
        return value
    if type_name in ('object', 'datetime', 'date'):
        return value
    m = re.fullmatch(r'list\[(.+)\]', type_name)
    if m:
        if not isinstance(value, list):
            raise Invalid(f'{where}: a list is required')
        return [build(m.group(1), v, f'{where}[{i}]') for i, v in enumerate(value)]
    m = re.fullmatch(r'dict\(str, (.+)\)', type_name)
    if m:
        if not isinstance(value, dict):
            raise Invalid(f'{where}: a map is required')
        return {k: build(m.group(1), v, f'{where}.{k}') for k, v in value.items()}
    cls = getattr(k8s, type_name)
    if not isinstance(value, dict):
        raise Invalid(f'{where}: an object ({type_name}) is required, not {value!r}')
    by_json = {j: p for p, j in cls.attribute_map.items()}
    kwargs = {}
    for key, v in value.items():
        if key not in by_json:
            raise Invalid(f'{where}: {type_name} has no field "{key}" (known: {", ".join(sorted(by_json))})')
        p = by_json[key]
        kwargs[p] = build(cls.openapi_types[p], v, f'{where}.{key}')
    try:
        return cls(**kwargs)
    except ValueError as e:   # a required field missing, or a value out of its enumeration
        raise Invalid(f'{where}: {e}') from None


def conf_value(text, key):
    m = re.search(rf'^{key}\s*=\s*"?([^"\n]*)"?\s*$', text, re.M)
    return m.group(1) if m else None


def check(cond, msg):
    if not cond:
        raise Invalid(msg)


def main(paths):
    docs = {}
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for d in yaml.safe_load_all(f):
                if d is None:
                    continue
                key = (d.get('apiVersion'), d.get('kind'))
                name = d.get('metadata', {}).get('name')
                where = f'{path}: {key[1]} {name}'
                if key not in MODELS:
                    raise Invalid(f'{where}: no schema here for {key[0]} {key[1]}')
                build(MODELS[key], d, where)
                docs.setdefault((key[1], name), []).append((path, d))
                print(f'k8s_validate: {where}: schema ok ({MODELS[key]})')

    conf = docs[('ConfigMap', 'aahd-config')][0][1]['data']['aahd.conf']
    port = int(conf_value(conf, 'port'))
    grace = int(conf_value(conf, 'shutdown_grace_seconds'))
    check(conf_value(conf, 'host') == '0.0.0.0', 'aahd.conf: host must be 0.0.0.0 in a pod')
    deployments = docs[('Deployment', 'aahd')]
    check(len(deployments) == 2, 'a CPU and a CUDA Deployment named aahd')
    for path, d in deployments:
        spec = d['spec']['template']['spec']
        c = spec['containers'][0]
        where = f'{path}: Deployment aahd'
        for probe in ('readinessProbe', 'livenessProbe', 'startupProbe'):
            check(c[probe]['httpGet']['path'] == '/health', f'{where}: {probe} is not on /health')
        check(c['ports'][0]['containerPort'] == port, f'{where}: containerPort is not aahd.conf\'s port {port}')
        ann = d['spec']['template']['metadata']['annotations']
        check(ann.get('prometheus.io/scrape') == 'true' and int(ann['prometheus.io/port']) == port
              and ann.get('prometheus.io/path') == '/metrics', f'{where}: scrape annotations')
        pre = c['lifecycle']['preStop']['exec']['command']
        check(pre[0] == 'sleep', f'{where}: the preStop hook should wait (sleep) for the endpoint to go')
        wait = int(pre[1])
        tgp = spec['terminationGracePeriodSeconds']
        check(tgp > wait + grace, f'{where}: terminationGracePeriodSeconds {tgp} <= preStop {wait} + grace {grace}')
        mounts = {m['name']: m for m in c['volumeMounts']}
        vols = {v['name']: v for v in spec['volumes']}
        check(mounts['model'].get('readOnly') is True and vols['model']['persistentVolumeClaim'].get('readOnly') is True,
              f'{where}: the model volume must be read-only')
        check(c['securityContext'].get('readOnlyRootFilesystem') is True, f'{where}: read-only root file system')
        check(conf_value(conf, 'model').startswith(mounts['model']['mountPath'] + '/'), f'{where}: model path')
        check(conf_value(conf, 'max_body_bytes') is not None, 'aahd.conf: max_body_bytes')
    cpu = next(d for p, d in deployments if 'cuda' not in p)
    gpu = next(d for p, d in deployments if 'cuda' in p)
    gres = gpu['spec']['template']['spec']['containers'][0]['resources']
    check(gres['limits'].get('nvidia.com/gpu') == '1', 'aahd-cuda.yaml: nvidia.com/gpu limit 1')
    check('--backend' in gpu['spec']['template']['spec']['containers'][0]['args'], 'aahd-cuda.yaml: --backend cuda')
    # the CUDA variant differs from the CPU one in image, args, resources and tolerations only
    a, b = copy.deepcopy(cpu), copy.deepcopy(gpu)
    for x in (a, b):
        s = x['spec']['template']['spec']
        s.pop('tolerations', None)
        for k in ('image', 'args', 'resources'):
            s['containers'][0].pop(k)
    check(a == b, 'aahd-cuda.yaml differs from aahd.yaml beyond image, args, resources and tolerations')

    svc = docs[('Service', 'aahd')][0][1]
    labels = cpu['spec']['template']['metadata']['labels']
    check(all(labels.get(k) == v for k, v in svc['spec']['selector'].items()), 'the Service does not select the pods')
    hpa = docs[('HorizontalPodAutoscaler', 'aahd')][0][1]['spec']
    check(hpa['scaleTargetRef'] == {'apiVersion': 'apps/v1', 'kind': 'Deployment', 'name': 'aahd'}, 'HPA target')
    metric = hpa['metrics'][0]['pods']['metric']['name']
    adapter = yaml.safe_load(docs[('ConfigMap', 'prometheus-adapter-aahd')][0][1]['data']['config.yaml'])
    served = [r['name']['as'] for r in adapter['rules']]
    check(metric in served, f'the HPA metric {metric} is not among the adapter\'s {served}')
    print(f'k8s_validate: probes, drain ({wait} + {grace} < {tgp} s), read-only model, scrape annotations on {port}, '
          f'CUDA variant, Service selector, HPA on {metric}: ok')


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except (Invalid, KeyError, StopIteration) as e:
        print(f'k8s_validate: FAILURE: {e!r}' if not isinstance(e, Invalid) else f'k8s_validate: FAILURE: {e}')
        sys.exit(1)
