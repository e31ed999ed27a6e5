{# USES_VARIABLES { N } #}
{# ALLOWS_SCALAR_WRITE #}
{# ctmhsa (neurons.simd): a state update whose loop GCC may vectorise. Each iteration reads and
   writes the state of its own element and reads values no iteration writes (the folded
   compartments'), which "#pragma GCC ivdep" asserts: GCC does not take the local __restrict
   pointers of Brian2's code as proof that the arrays do not overlap. With OpenMP the same
   assertion is the loop's "simd" clause (no other pragma may stand between "omp for" and its
   loop). #}
{% extends 'common_group.cpp' %}

{% block maincode %}
    // scalar code
    const size_t _vectorisation_idx = -1;
    {{scalar_code|autoindent}}

    const int _N = {{constant_or_scalar('N', variables['N'])}};
    {% if openmp_pragma('with_openmp') %}
    #pragma omp parallel for simd schedule(static)
    {% else %}
    #pragma GCC ivdep
    {% endif %}
    for(int _idx=0; _idx<_N; _idx++)
    {
        const size_t _vectorisation_idx = _idx;
        {{vector_code|autoindent}}
    }
{% endblock %}
