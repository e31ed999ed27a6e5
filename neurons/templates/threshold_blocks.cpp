{# USES_VARIABLES { N } #}
{# ctmhsa (neurons.threshold): a NeuronGroup's spike condition tested in blocks of cells, one
   block per OpenMP thread (Brian2's own threshold template is one serial loop). Each block
   writes its events at the start of its own range of the event space (a block cannot hold
   more events than cells); the blocks are then moved together in block order, so the event
   space lists the events in increasing cell order, as a serial loop writes them. Without
   OpenMP there is one block. #}
{% extends 'common_group.cpp' %}

{% block extra_headers %}
#include<cstring>
{% endblock %}

{% block maincode %}
    {% set _eventspace = get_array_name(eventspace_variable) %}
    // scalar code
    const int _vectorisation_idx = -1;
    {{scalar_code|autoindent}}

    const int _n_blocks = {{openmp_pragma('get_num_threads')}};
    long _block_events[{{openmp_pragma('get_num_threads')}}];
    {{openmp_pragma('parallel')}}
    {
        {% if openmp_pragma('with_openmp') %}
        // a smaller team than asked for takes the blocks in turns
        const int _team = omp_get_num_threads();
        {% else %}
        const int _team = 1;
        {% endif %}
        for(int _block={{openmp_pragma('get_thread_num')}}; _block<_n_blocks; _block+=_team)
        {
            const size_t _start = ((size_t)N*_block)/_n_blocks;
            const size_t _stop = ((size_t)N*(_block + 1))/_n_blocks;
            long _n_events = 0;
            for(size_t _idx=_start; _idx<_stop; _idx++)
            {
                const size_t _vectorisation_idx = _idx;
                {{vector_code|autoindent}}
                if(_cond) {
                    {{_eventspace}}[_start + _n_events++] = _idx;
                    {% if _uses_refractory %}
                    {{not_refractory}}[_idx] = false;
                    {{lastspike}}[_idx] = {{t}};
                    {% endif %}
                }
            }
            _block_events[_block] = _n_events;
        }
    }
    long _count = _block_events[0];
    for(int _block=1; _block<_n_blocks; _block++)
    {
        std::memmove(&{{_eventspace}}[_count], &{{_eventspace}}[((size_t)N*_block)/_n_blocks],
                     _block_events[_block]*sizeof({{_eventspace}}[0]));
        _count += _block_events[_block];
    }
    {{_eventspace}}[N] = _count;
{% endblock %}

{% block after_code %}
{% set _eventspace = get_array_name(eventspace_variable) %}
{{_eventspace}}[N] = 0;  // N + 1 entries: the last holds the number of events
{% endblock %}
